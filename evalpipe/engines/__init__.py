"""Local inference engines that evalpipe starts and stops itself (llama.cpp, vLLM)."""
