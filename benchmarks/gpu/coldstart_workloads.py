"""Lifecycle workloads for the GPU cold-start script: GPT-2 (shipped config
suites/configs/llm/gpt2.json, random weights) as a logits-only prefill forward.

The LLM suite's `gpt2` workload calls the model with labels and a KV cache (what its
scenarios need); torch.export and AOTInductor want plain tensors in and out, so this
wrapper passes `use_cache=False` and returns the logits.
"""

from __future__ import annotations

import torch

from harness import workload


class Logits(torch.nn.Module):
    """The causal LM's logits for `input_ids`, no KV cache. At module level because
    aot_compile's package refers to the model's class by its importable name."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


@workload("gpt2-prefill-logits", unit="tokens", batch_size=1, scenarios=("forward",), options=("prompt_len",),
          description="GPT-2 forward over a prompt, logits only (cold-start table)")
def gpt2_prefill_logits(ctx):
    from suites.llm import FAMILIES, build_config, build_model, config_path, load_config_dict

    family = next(f for f in FAMILIES if f.name == "gpt2")
    config = build_config(load_config_dict(config_path(family, ctx.size)))
    prompt_len = int(ctx.options.get("prompt_len", 128 if ctx.size == "full" else 16))

    model = Logits(build_model(config, ctx.device, ctx.dtype))
    ids = torch.randint(3, int(config.vocab_size), (ctx.batch_size, prompt_len), device=ctx.device)
    return model, (ids,)
