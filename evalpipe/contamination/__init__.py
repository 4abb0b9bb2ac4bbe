"""Has the model seen this benchmark? A contamination probe that needs only the model's endpoint.

Two signals, each from the literature, written into ``<run>/contamination.json``:

* **guided vs general completion** (Golchin & Surdeanu, "Time Travel in LLMs: Tracing Data
  Contamination in Large Language Models", ICLR 2024): the first half of each sample's first input
  field is given to the model twice — once with an instruction naming the data set and split and
  asking for the exact continuation, once asking only to complete the text — and each completion is
  scored by ROUGE-L against the true second half. A model that completes better when told the
  data set's name (a paired bootstrap interval of the difference above 0), or that reproduces the
  second half (exact or near-exact completions), has likely seen the data;
* **Min-K % Prob** (Shi et al., "Detecting Pretraining Data from Large Language Models", ICLR 2024),
  where the endpoint returns prompt log-probabilities: the mean log-probability of each test text's
  k % least likely tokens, beside the same score on a reference text the user names.

Modules, one concept each: ``halves`` (which field, how it is cut, how a completion is normalised),
``scoring`` (ROUGE-L, the paired bootstrap, the verdict, Min-K %), ``prompts`` (the Jinja
instructions under ``prompts/contamination/``), ``logprobs`` (the prompt log-probability requests),
``result`` (the JSON file, read by the report without any backend) and ``probe`` (load, store,
ask, score, write). User documentation: ``docs/contamination.md``.
"""
