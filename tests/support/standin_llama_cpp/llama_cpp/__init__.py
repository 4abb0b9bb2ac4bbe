"""A stand-in for ``llama_cpp`` (only ``Llama(...).create_completion``) for the smoke test's tests.

``STANDIN_LLAMA`` picks how its first token goes, as real builds went on an AVX-512 VM:
``ok`` (one token), ``segv`` (the process kills itself with SIGSEGV, as the native build did),
``sigill`` (an instruction the CPU lacks), ``hang`` (never answers).
"""

import os
import signal
import time


class Llama:
    def __init__(self, model_path, **kwargs):
        print(f"llama_model_loader: loaded {model_path}", flush=True)

    def create_completion(self, prompt, max_tokens=16, **kwargs):
        mode = os.environ.get("STANDIN_LLAMA", "ok")
        if mode == "segv":
            print("ggml_cpu: about to run the AVX-512 kernel", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "sigill":
            os.kill(os.getpid(), signal.SIGILL)
        if mode == "hang":
            time.sleep(3600)
        return {"choices": [{"text": " Paris"}]}
