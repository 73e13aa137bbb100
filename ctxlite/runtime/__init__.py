"""The model runtime: llama.cpp inference with KV-cache reuse (``engine``), the C kernels over
logit rows (``kernels``), the model registry (``models``), sampling (``sampling``), prompt
templates (``templates``) and the seam both methods are written against (``backend``)."""
