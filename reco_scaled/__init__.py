"""reco_scaled: reco_mini's GRPO/ReCo math at scale (torchrun, FSDP2, vLLM, fused kernels).

The math lives in reco_mini and is imported, never re-derived here.
"""
