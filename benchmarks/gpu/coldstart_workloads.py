"""Lifecycle workloads for the GPU cold-start script: GPT-2 (shipped config
suites/configs/llm/gpt2.json, random weights) as a logits-only prefill forward.

The LLM suite's `gpt2` workload calls the model with labels and a KV cache (what its
scenarios need); torch.export and AOTInductor want plain tensors in and out, so this
wrapper passes `use_cache=False` and returns the logits.
"""

from __future__ import annotations

from harness import workload


@workload("gpt2-prefill-logits", unit="tokens", batch_size=1, scenarios=("forward",),
          description="GPT-2 forward over a prompt, logits only (cold-start table)")
def gpt2_prefill_logits(ctx):
    import torch

    from suites.llm import FAMILIES, build_config, build_model, config_path, load_config_dict

    family = next(f for f in FAMILIES if f.name == "gpt2")
    config = build_config(load_config_dict(config_path(family, ctx.size)))
    prompt_len = int(ctx.options.get("prompt_len", 128 if ctx.size == "full" else 16))

    class Logits(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False).logits

    model = Logits(build_model(config, ctx.device, ctx.dtype))
    ids = torch.randint(3, int(config.vocab_size), (ctx.batch_size, prompt_len), device=ctx.device)
    return model, (ids,)
