"""The task-file schema: what every task file holds, whatever its kind (pydantic models).

A task file is one of the kinds' models (:mod:`evalpipe.tasks.kinds`), each a subclass of
:class:`TaskFile` adding the keys of its kind (``labels`` for ``classification``, ``options`` for
``multiple_choice`` …), chosen by the ``kind`` key. Every model forbids unknown keys, so a typo is an
error that names the key and suggests the nearest known one, never a silently ignored setting.

Every key is documented by its ``description`` here, which is what ``evalpipe tasks --schema``
prints and what ``docs/tasks.md`` explains with examples.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
#: data formats by name; ``auto`` decides by the file's extension (see :mod:`evalpipe.tasks.taskfile.load`)
FORMATS = ("auto", "jsonl", "json", "json_object", "csv", "tsv", "parquet", "conll")


def _scalar_text(value: Any) -> Any:
    """A number where text is expected is its text (``1`` → ``"1"``); a YAML boolean is refused with
    the reason (YAML reads unquoted ``yes``/``no``/``on``/``off`` as true/false)."""
    if isinstance(value, bool):
        raise ValueError(f"found the YAML boolean {str(value).lower()} where text is expected: quote it "
                         "(YAML reads unquoted yes, no, on, off, true, false as booleans)")
    if isinstance(value, (int, float)):
        return str(value)
    return value


#: text in a task file: a number is taken as its text, a YAML boolean is an error with the reason
Text = Annotated[str, BeforeValidator(_scalar_text)]
#: a file name, or several names of one file (tried in order: releases name files differently)
FileNames = Text | list[Text]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DataSpec(Strict):
    """Where the examples come from."""

    files: dict[Text, FileNames] = Field(
        description="Data file per split, e.g. {test: test.jsonl, train: train.jsonl}: a name, or a list of "
        "alternative names tried in order. Relative names are looked up under --data-dir (and its `dir` "
        "sub-folder), then in `default_dir`; `--data TASK=PATH` replaces the evaluated file, "
        "`--data TASK:shots=PATH` the file shots come from.")
    split: Text | None = Field(None, description="The split evaluated by default (--split overrides); default: "
                               "`test` if there is one, else the first split listed.")
    format: Literal[FORMATS] = Field(  # type: ignore[valid-type]
        "auto", description="File format: auto (by extension: .jsonl/.json JSON lines or a JSON array, .csv, "
        ".tsv, .parquet, .conll/.bio/.iob CoNLL), or one of jsonl, json, json_object (one JSON object whose "
        "values are the records and whose keys are their ids), csv, tsv, parquet, conll.")
    columns: list[Text] | None = Field(None, description="Column names of a CSV/TSV file without a header row "
                                       "(MMLU's files); without it the first row is the header.")
    dir: Text | None = Field(None, description="Sub-folder of --data-dir the files may be in (e.g. MedNLI).")
    default_dir: Text | None = Field(None, description="Folder (relative to the task file) searched when the "
                                     "files are not under --data-dir: shipped data, or a conventional place.")
    dataset: Text | None = Field(None, description="The data set's name, for messages (default: the task name).")
    published: Text | None = Field(None, description="Where the data is published (URL), shown when a file "
                                   "is missing.")
    how: Text | None = Field(None, description="How to obtain the files when it is not a plain download.")
    notes: dict[Text, Text] = Field(default_factory=dict, description="Split → a note added to every error in "
                                    "that split's file (e.g. test: 'test labels are hidden; evaluate dev').")

    @field_validator("files")
    @classmethod
    def _some_file(cls, files: dict[str, Any]) -> dict[str, Any]:
        if not files:
            raise ValueError("name at least one split and its file")
        for split, names in files.items():
            if isinstance(names, list) and not names:
                raise ValueError(f"split {split!r}: give at least one file name")
        return files

    def default_split(self) -> str:
        return self.split or ("test" if "test" in self.files else next(iter(self.files)))

    def names(self, split: str) -> tuple[str, ...]:
        value = self.files[split]
        return tuple(value) if isinstance(value, list) else (value,)

    @model_validator(mode="after")
    def _split_known(self) -> DataSpec:
        if self.split is not None and self.split not in self.files:
            raise ValueError(f"split {self.split!r} is not one of files: {', '.join(self.files)}")
        return self


class FieldsSpec(Strict):
    """Which field of a record is what."""

    inputs: dict[Text, FileNames] = Field(
        default_factory=dict,
        description="Template variable → record field: {question: Question} makes `example.question` the "
        "record's `Question`. A list gives alternative field names (first present wins; releases differ). "
        "Values may be text, numbers (given as text), lists or objects (templates may loop over them).")
    optional: list[Text] = Field(default_factory=list, description="Inputs that may be missing or empty (they "
                                 "are then the empty text); any other missing or empty input is an error.")
    lists: list[Text] = Field(default_factory=list, description="Inputs that hold a list the template loops over "
                              "(PubMedQA's CONTEXTS): a single text is taken as a one-item list (never looped "
                              "over letter by letter); a number or an object is an error naming file, line and field.")
    answer: FileNames | None = Field(
        None,
        description="The gold field: the label (classification), the correct option (multiple_choice), the "
        "reference text (generation), the codes (code_list), the BIO tags (span_ner; CoNLL files: implied), "
        "the relevant answer (retrieval). `label` is accepted as another name for this key.")
    label: FileNames | None = Field(None, description="Same as `answer` (for classification tasks).")
    id: Text | None = Field(None, description="Field holding the sample id (unique in the file); default: "
                            "ids from the row, see `row_id`.")
    id_format: Text = Field("{id}", description="How a sample id is written from the id field: `{id}` is "
                            "its value, `{split}` the split (e.g. `{split}-{id}`).")
    row_id: Text | None = Field(
        "{split}-{row}",
        description="Id of a record by its position, `{row}` (0-based) and `{split}`: used for every record "
        "when there is no `id` field, and for records that lack it; null makes a missing id field an error.")

    def gold_field(self) -> FileNames | None:
        return self.answer if self.answer is not None else self.label

    @model_validator(mode="after")
    def _one_gold_key(self) -> FieldsSpec:
        if self.answer is not None and self.label is not None:
            raise ValueError("give the gold field as `answer` or as `label`, not both")
        for key in ("optional", "lists"):
            unknown = [name for name in getattr(self, key) if name not in self.inputs]
            if unknown:
                raise ValueError(f"{key} names {', '.join(unknown)}, which are not inputs "
                                 f"(inputs: {', '.join(self.inputs) or 'none'})")
        return self


class ShotsSpec(Strict):
    """Few-shot examples: how many by default, and where they come from (never the evaluated rows)."""

    count: int = Field(0, ge=0, description="Shots per prompt by default (--shots overrides).")
    source: Text | list[Text] = Field(
        "train", description="A split of `data.files` shots are drawn from (a list: the first that is not "
        "the evaluated split), or `held_out`: `count` rows of the evaluated file are set aside as shots, "
        "by a seeded shuffle, and not scored.")
    seed: int | None = Field(None, description="Shots from a split: null = the first `count` (file order), "
                             "a number = a seeded random sample (--fewshot-seed overrides). held_out: the seed "
                             "of the shuffle that chooses the rows (default 0; CLUE's reference uses 1).")

    def sources(self) -> tuple[str, ...]:
        return tuple(self.source) if isinstance(self.source, list) else (self.source,)

    @property
    def held_out(self) -> bool:
        return self.sources() == ("held_out",)


class GenerationSpec(Strict):
    max_tokens: int = Field(256, ge=1, description="New tokens per answer (--max-tokens overrides).")
    chat_max_tokens: int | None = Field(None, ge=1, description="New tokens per chat answer, when a chat "
                                        "model needs room for a reasoning block before a short answer (default: "
                                        "the kind's reasoning budget, else max_tokens; --max-tokens overrides).")
    stop: list[Text] = Field(default_factory=list, description="Stop sequences of the plain completion form "
                             "(--endpoint completions, base models); chat answers end where the model stops.")
    completion_prefix: Text = Field("", description="Text the completion template ends with and the answer "
                                    "continues (put back in front of the answer before parsing).")


class QuickSpec(Strict):
    max_tokens: int = Field(ge=1, description="New tokens per answer in the quick demo (`evalpipe demo`).")
    stop: list[Text] = Field(default_factory=list, description="Stop sequences in the quick demo (every form).")


class TaskFile(Strict):
    """Keys every task file has; each kind's model adds its own."""

    #: whether the kind renders prompts from a template (a retrieval task embeds its query text instead)
    template_needed: ClassVar[bool] = True

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="The task's name (`--task NAME`): lower "
                               "case letters, digits, `_`, `-`, `.`.")]
    kind: str = Field(description="The task kind: how answers are parsed and scored (`evalpipe tasks --kinds`).")
    description: Text = Field("", description="One line shown by `evalpipe tasks` and in reports.")
    data: DataSpec
    fields: FieldsSpec = Field(default_factory=FieldsSpec)
    shots: ShotsSpec = Field(default_factory=ShotsSpec)
    template: Text | None = Field(None, description="The Jinja template, relative to the task file (macros "
                                  "prompt, and optionally system, turn, completion: see prompts/README.md).")
    template_text: Text | None = Field(None, description="The template itself, inline, instead of a file.")
    template_vars: dict[Text, Any] = Field(default_factory=dict, description="Values every render sees as "
                                           "`task.*` (label lists, entity descriptions).")
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    quick: QuickSpec | None = Field(None, description="Generation caps of the quick demo (`./run.sh`), where "
                                    "small models ramble: the run records them; other runs ignore them.")
    metrics: list[Text] | None = Field(None, description="Metrics in display order (default: the kind's); "
                                       "each must be one the kind computes (`*` matches any text).")
    primary_metric: Text | None = Field(None, description="The headline metric (default: the kind's).")
    long_field: Text | None = Field(None, description="The input that may be cut from its end to fit the "
                                    "model's context (a clinical note; never the question).")
    credentialed: bool = Field(False, description="Data under a credentialed licence (PhysioNet): never sent "
                               "to a non-local endpoint unless --allow-external-endpoint.")
    citation: Text = Field("", description="How to cite the data set (shown by `evalpipe tasks`).")
    licence: Text = Field("", description="The data's licence or terms of use.")
    suites: list[Text] = Field(default_factory=list, description="Suites the task belongs to (`--suite NAME`).")
    answer_kind: Literal["free_text"] | None = Field(
        None, description="free_text: the answers are free text that LLM judges may rate (`evalpipe judge`); "
        "the generation kind's default. Labels, spans, codes and rankings are scored, never judged.")
    judge_rubric: Text | None = Field(None, description="The judge rubric of this task (a template under "
                                      "prompts/, e.g. judge/problem_list.j2); default: the one of its answer kind.")
    metric_definitions: dict[Text, Text] = Field(default_factory=dict, description="Metric → a one-line "
                                                 "definition in the task's own words (the report's glossary).")
    hook: Text | None = Field(
        None, description="`module:function` or `file.py:function` (relative to the task file): Python for "
        "what no key expresses. Called with the TaskSpec built from this file and the validated task file, "
        "it returns the TaskSpec to use (e.g. with a compatibility scoring added, or a loader wrapped).")

    @model_validator(mode="after")
    def _common_rules(self) -> TaskFile:
        if self.template is not None and self.template_text is not None:
            raise ValueError("give `template` (a file) or `template_text` (inline), not both")
        if self.template is None and self.template_text is None and self.template_needed:
            raise ValueError("a task needs `template` (a file next to the task file) or `template_text`")
        if self.long_field is not None and self.long_field not in self.fields.inputs:
            raise ValueError(f"long_field {self.long_field!r} is not an input (inputs: "
                             f"{', '.join(self.fields.inputs) or 'none'})")
        if self.hook is not None and not re.fullmatch(r"[\w./-]+(?:\.py)?:[A-Za-z_]\w*", self.hook):
            raise ValueError(f"hook {self.hook!r}: expected module:function or file.py:function")
        return self
