"""The incremental decoder behind ``model.generate()``: the model's decoder, one token at a time, for the searches of
``generation_vanilla_transformer.py``.

Why it is faster than transformers' loop (measurements: docs/decoding.md): one decoding step of a
small model is a hundred-odd tiny operations, so their overhead, not the arithmetic, sets the speed. Here

* the cross-attention keys and values of all decoder layers are one matrix product per call, computed once per
  sentence (not per beam): the k beams of a sentence are k queries against its encoder output;
* self-attention keys and values go into one preallocated buffer, time-major, so that following the surviving
  beams is one ``index_select`` for all layers, which also drops the rows of finished sentences;
* the query, key and value projections of self-attention are one fused matrix product;
* no masks, position ids or cache objects are built per step.

This file imports only torch: it is copied next to a saved model with the generation file, which imports it, and
runs as remote code.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SDPA_BACKENDS: dict[str, tuple[str, ...]] = {"cuda": ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")}
"""The backends of ``F.scaled_dot_product_attention`` that the model's own attention calls may use, by device type
(names of ``torch.nn.attention.SDPBackend``); a device type not listed keeps torch's choice. On CUDA, cuDNN's
attention is left out: torch >= 2.10 tries it first on Hopper GPUs, and cuDNN builds a new execution graph for every
new batch and length shape, which batches of varying lengths (training) and a key length growing by one at every
decoding step miss every time (an H200 trained the base model at 34,294 tokens/s with it and 193,388 without it,
issue 55). Flash attention takes the unpadded calls, memory-efficient attention those with a padding mask, and the
math kernel what neither supports. The model's maths is the same whichever runs."""

_ENABLED = {
    "FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled,
    "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled,
    "MATH": torch.backends.cuda.math_sdp_enabled,
    "CUDNN_ATTENTION": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False),
}
"""torch's process-wide switches of each backend (``torch.backends.cuda.enable_*_sdp``): a backend the user switched
off stays off."""


@torch.compiler.assume_constant_result
def sdpa_backends(device_type: str) -> tuple[SDPBackend, ...] | None:
    """The SDPA backends the model's attention on `device_type` runs under: `SDPA_BACKENDS` less those torch's global
    switches turned off; None (torch's own choice, untouched) where the device type is not listed, or where none of
    its backends is on (the user chose another one, e.g. cuDNN's alone). Compiled code takes the answer of its
    tracing as a constant (read at trace time: the switches are not Tensors dynamo could trace)."""
    names = [name for name in SDPA_BACKENDS.get(device_type, ()) if _ENABLED.get(name, lambda: False)()]
    return tuple(getattr(SDPBackend, name) for name in names) or None


def attention_backends(device: torch.device) -> AbstractContextManager:
    """A context in which ``F.scaled_dot_product_attention`` on `device` uses `sdpa_backends` only: torch's switches
    are narrowed inside it and restored as it exits, so that the choice holds for the model's own calls, never for
    a user's other models. Dynamo traces it without a graph break."""
    backends = sdpa_backends(device.type)
    return nullcontext() if backends is None else sdpa_kernel(list(backends))


_PLAIN = {
    "q_proj": torch.nn.Linear,
    "k_proj": torch.nn.Linear,
    "v_proj": torch.nn.Linear,
    "out_proj": torch.nn.Linear,
    "fc1": torch.nn.Linear,
    "fc2": torch.nn.Linear,
    "self_attn_layer_norm": torch.nn.LayerNorm,
    "encoder_attn_layer_norm": torch.nn.LayerNorm,
    "final_layer_norm": torch.nn.LayerNorm,
}
"""The modules whose parameters `DecoderWeights` copies, by name within a decoder layer, and the one type each must
have exactly: a subclass (a PEFT layer, a quantized linear layer) computes something else from the same
``.weight``. The one exception is a LoRA layer over a plain ``nn.Linear`` (`lora_problem`), which is folded in."""


def incremental_decoder_problem(model) -> str:
    """Why `IncrementalDecoder` would not compute what `model` computes (``""`` when it would): the one rule of both
    ways to it, ``generate()`` (`generation_vanilla_transformer.FastGenerationMixin`) and the package's search
    (``vanilla_transformer.serving.step_decoders.step_decoder``). The model must be this package's (a
    ``FastGenerationMixin``, also when loaded as remote code), drop nothing (no dropout in training mode), and have
    the plain modules the decoder copies (`unsupported_modules`)."""
    if not any(cls.__name__ == "FastGenerationMixin" for cls in type(model).__mro__):
        return f"a {type(model).__name__}, not this package's model"
    if model.training and _has_dropout(model):
        return "the model in training mode, with dropout"
    return unsupported_modules(model)


def _has_dropout(model) -> bool:
    """Whether a forward pass in training mode drops anything: attention dropout is a rate the attention function
    applies, not an ``nn.Dropout`` module, so the configuration's rates are what tell."""
    config = model.config
    rates = (getattr(config, name, 0.0) for name in ("dropout", "attention_dropout", "activation_dropout"))
    return any(rate > 0 for rate in rates) or any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def unsupported_modules(model, *, traced: bool = False) -> str:
    """Why a computation built from the model's modules, not its forward pass, would differ from what the modules
    compute (``""`` when it would not): the one refusal of adapters and hooks, for the two such computations.

    * ``traced=False``: the weights `DecoderWeights` copies for `IncrementalDecoder`. Every module it copies is
      exactly ``nn.Linear``, ``nn.LayerNorm`` or ``nn.Embedding`` (or a plain LoRA layer over an ``nn.Linear``,
      which it folds in: `lora_problem`), and no module of the decoder or the output projection has a hook.
    * ``traced=True``: the ONNX graphs (``export/onnx_graphs.py``), traced from the model's layers as plain ones: no
      module of the model is a PEFT layer (an adapter not merged into the weights) or has a hook.

    A hook is a forward hook, a pre-hook or an Accelerate hook (`hooked`); global module hooks are refused too."""
    if traced:
        scope, whole = list(model.named_modules()), "the model"
        problem = next((_peft_problem(name or whole, module) for name, module in scope if _is_peft(module)), "")
    else:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        scope, whole = [*decoder.named_modules(), ("lm_head", head)], "the decoder"
        problem = _copied_modules_problem(decoder, head)
    if problem:
        return problem
    with_hooks = [name for name, module in scope if hooked(module)]
    if with_hooks:
        return f"a forward hook on {with_hooks[0] or whole}"
    if any(getattr(torch.nn.modules.module, f"_global_forward_{kind}hooks", None) for kind in ("", "pre_")):
        return "global module hooks"
    return ""


def _copied_modules_problem(decoder, head) -> str:
    """Why a module `DecoderWeights` copies is not the plain one it copies (``""`` when each is)."""
    copied = [("embed_tokens", torch.nn.Embedding, decoder.embed_tokens), ("lm_head", torch.nn.Linear, head)]
    for name, module in decoder.layers.named_modules():
        if name.rpartition(".")[2] in _PLAIN:
            copied.append((f"layers.{name}", _PLAIN[name.rpartition(".")[2]], module))
    for name, kind, module in copied:
        if kind is torch.nn.Linear and name != "lm_head" and _is_lora_linear(module):
            problem = lora_problem(module)
            if problem:
                return f"{name}: {problem}"
        elif type(module) is not kind:
            return f"{name} is a {type(module).__name__}, not a plain {kind.__name__} (an adapter?)"
    return ""


def _is_peft(module) -> bool:
    return type(module).__module__.startswith("peft.")


def _peft_problem(name: str, module) -> str:
    return f"{name} is a PEFT {type(module).__name__} (merge the adapter first: merge_and_unload())"


_OUTPUT_RECORDING = "transformers.utils.output_capturing"
"""transformers' own hooks, which record hidden states and attention weights when asked (``output_attentions``) and
change no output: the one kind of hook the decoder's copies may ignore."""


def hooked(module: torch.nn.Module) -> bool:
    """Whether `module` has a forward hook, a pre-hook or an Accelerate hook other than transformers' own
    output recording: something its parameters alone do not compute."""
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    return hasattr(module, "_hf_hook") or any(getattr(h, "__module__", None) != _OUTPUT_RECORDING for h in hooks)


# LoRA (Hu et al., 2021), as the PEFT library implements it: ``y = base(x) + scaling * B(A(dropout(x)))`` for each
# active adapter. In eval mode that is the affine map ``W + scaling * B A``, which the prepared copies can hold. This
# file cannot import peft (it runs as remote code): it reads the attributes of peft's `lora.Linear`, and serves
# only the plain form; ``tests/test_peft.py`` checks the result against decoding by forward passes.


def _is_lora_linear(module) -> bool:
    kind = type(module)
    return kind.__name__ == "Linear" and kind.__module__.startswith("peft.tuners.lora")


def _active_adapters(module) -> list[str]:
    return [name for name in module.active_adapters if name in module.lora_A]


def lora_problem(module) -> str:
    """Why a PEFT LoRA layer cannot be folded into one weight (``""`` when it can): its base must be a plain
    ``nn.Linear`` and each active adapter plain LoRA (no DoRA or other variant, plain ``nn.Linear`` A and B, A
    without a bias, no dropout in training mode, no ``fan_in_fan_out``)."""
    if type(module.base_layer) is not torch.nn.Linear:
        return f"a LoRA layer over a {type(module.base_layer).__name__}"
    if getattr(module, "fan_in_fan_out", False):
        return "a LoRA layer with fan_in_fan_out"
    if module.disable_adapters and module.merged:  # peft unmerges it at its next forward pass
        return "a merged LoRA layer with its adapters disabled"
    for name in [] if module.disable_adapters or module.merged else _active_adapters(module):
        a, b, dropout = module.lora_A[name], module.lora_B[name], module.lora_dropout[name]
        if name in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(name):
            return f"adapter {name!r} is a LoRA variant (DoRA, ...)"
        if type(a) is not torch.nn.Linear or type(b) is not torch.nn.Linear or a.bias is not None:
            return f"adapter {name!r} has LoRA matrices other than plain nn.Linear"
        if dropout.training and type(dropout) is not torch.nn.Identity and getattr(dropout, "p", 1.0) > 0:
            return f"adapter {name!r} drops out in training mode"
    return ""


def _lora_state(module) -> tuple:
    """What decides a LoRA layer's map besides its parameters: the active adapters, merged or not, their scales."""
    return (tuple(module.active_adapters), module.merged, module.disable_adapters, tuple(module.scaling.items()))


def _affine(module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of the map `module` computes: a plain ``nn.Linear``'s own; for a LoRA layer its base's, plus
    ``scaling * B A`` of each active adapter (and ``scaling * b_B`` where B has a bias), unless merged already."""
    if not _is_lora_linear(module):
        return module.weight, module.bias
    weight, bias = module.base_layer.weight, module.base_layer.bias
    if module.disable_adapters or module.merged:
        return weight, bias
    for name in _active_adapters(module):
        a, b = module.lora_A[name].weight, module.lora_B[name].weight
        b_bias, scaling = module.lora_B[name].bias, module.scaling[name]
        weight = weight + scaling * (b.float() @ a.float()).to(weight.dtype)
        if b_bias is not None:
            bias = scaling * b_bias if bias is None else bias + scaling * b_bias
    return weight, bias


class _Linear:
    """``x W^T + b`` as ``addmm(b, x, W^T)`` with ``W^T`` stored contiguous: with the few rows of a decoding step,
    BLAS multiplies a row-major ``[in, out]`` matrix 1.5 times faster than the transposed ``[out, in]`` one."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight_t, self.bias = weight.t().contiguous(), bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias is None:
            return torch.mm(x, self.weight_t)
        return torch.addmm(self.bias, x, self.weight_t)


def _linear(*modules) -> _Linear:
    """One `_Linear` computing the outputs of `modules` (``nn.Linear`` of the same input) side by side."""
    weights, biases = zip(*(_affine(m) for m in modules), strict=True)
    if any(b is not None for b in biases):  # (attention_bias=False and no LoRA bias: none of them has one)
        biases = [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases, strict=True)]
        return _Linear(torch.cat(weights), torch.cat(biases))
    return _Linear(torch.cat(weights))


class _LayerWeights:
    """One decoder layer's parameters in the layout the step uses: fused self-attention Q/K/V."""

    def __init__(self, layer):
        attn, cross = layer.self_attn, layer.encoder_attn
        self.qkv = _linear(attn.q_proj, attn.k_proj, attn.v_proj)
        self.out = _linear(attn.out_proj)
        self.query = _linear(cross.q_proj)
        self.cross_out = _linear(cross.out_proj)
        self.fc1, self.fc2 = _linear(layer.fc1), _linear(layer.fc2)
        # ReLU (the paper's) in place, without a module call
        self.activation = torch.relu_ if isinstance(layer.activation_fn, torch.nn.ReLU) else layer.activation_fn
        self.norms = [
            (norm.normalized_shape, norm.weight, norm.bias, norm.eps)
            for norm in (layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm)
        ]


class DecoderWeights:
    """The decoder's parameters prepared for decoding, kept on the model and rebuilt when a parameter changes.

    The prepared copies (transposed, fused) take as much memory again as the decoder and the output projection.
    """

    def __init__(self, model):
        decoder = model.get_decoder()
        self.key = self.version_key(model)
        self.layers = [_LayerWeights(layer) for layer in decoder.layers]
        # The cross-attention keys and values of every layer: one [d, L * 2 * d] matrix.
        self.memory = _linear(
            *[p for layer in decoder.layers for p in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj)]
        )
        self.embedding = decoder.embed_tokens.weight
        self.embed_scale = decoder.embed_scale
        self.positions = decoder.embed_positions.pe.to(self.embedding.dtype)
        self.lm_head = _Linear(model.get_output_embeddings().weight)
        self.heads = decoder.layers[0].self_attn.num_heads
        self.head_dim = decoder.layers[0].self_attn.head_dim

    @staticmethod
    def version_key(model) -> tuple:
        """Changes when a parameter is replaced, moved, cast or updated in place (an optimizer step)."""
        parameters = [*model.get_decoder().parameters(), *model.get_output_embeddings().parameters()]
        adapters = [_lora_state(m) for m in model.get_decoder().modules() if _is_lora_linear(m)]
        key = [(p.data_ptr(), p.dtype, p.device, None if p.is_inference() else p._version) for p in parameters]
        return (*key, *adapters)

    @classmethod
    def of(cls, model) -> DecoderWeights:
        weights = getattr(model, "_fast_decoder_weights", None)
        if weights is None or weights.key != cls.version_key(model):
            with torch.no_grad():
                weights = cls(model)
            model._fast_decoder_weights = weights
        return weights


class IncrementalDecoder:
    """The decoder of one `generate()` call: rows are hypotheses, ``beams`` consecutive rows per sentence.

    Self-attention keys and values of all layers live in one preallocated buffer ``[T, rows, L, 2, H, d_k]``, time
    first, so that `select` (follow the surviving beams, drop finished sentences) is one ``index_select`` of its
    first t steps into a second buffer. Cross-attention keys and values are computed once, per sentence, as one
    matrix product. Each step then takes about 20 tensor operations per layer: their count, more than their
    arithmetic, sets the speed of a small model.
    """

    def __init__(self, weights: DecoderWeights, memory: torch.Tensor, memory_mask, beams: int, max_steps: int):
        self.w, self.beams, self.step_index = weights, beams, 0
        sentences, source_length = memory.shape[:2]
        layers, heads, head_dim = len(weights.layers), weights.heads, weights.head_dim
        projected = weights.memory(memory.flatten(0, 1))  # [B * S, L * 2 * d]
        self.memory_mask = None  # [B, 1, 1, S], 0 = attend, -inf = padding; None when nothing is padded
        if memory_mask is not None and not bool(memory_mask.all()):
            additive = torch.zeros(memory_mask.shape, dtype=memory.dtype, device=memory.device)
            self.memory_mask = additive.masked_fill_(memory_mask == 0, -math.inf)[:, None, None, :]
        self._set_memory(projected.view(sentences, source_length, layers, 2, heads, head_dim))
        self.max_steps, self.row_shape = max_steps, (layers, 2, heads, head_dim)
        rows = sentences * beams
        self._storage = [memory.new_empty(max_steps * rows * math.prod(self.row_shape)) for _ in range(2)]
        self._set_cache(self._view(self._storage[0], rows))

    def _view(self, storage: torch.Tensor, rows: int) -> torch.Tensor:
        return storage[: self.max_steps * rows * math.prod(self.row_shape)].view(self.max_steps, rows, *self.row_shape)

    def _set_cache(self, cache: torch.Tensor) -> None:
        self.cache = cache  # [T, rows, L, 2, H, d_k]
        per_layer = cache.permute(2, 3, 1, 4, 0, 5)  # [L, 2, rows, H, T, d_k]
        self.keys, self.values = per_layer[:, 0].unbind(0), per_layer[:, 1].unbind(0)

    def _set_memory(self, memory: torch.Tensor) -> None:
        self.memory = memory  # [B, S, L, 2, H, d_k]
        per_layer = memory.permute(2, 3, 0, 4, 1, 5)  # [L, 2, B, H, S, d_k]
        self.memory_keys, self.memory_values = per_layer[:, 0].unbind(0), per_layer[:, 1].unbind(0)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` of the next token after `tokens` ``[rows]``, the last token of each hypothesis; its
        attention under the model's SDPA backends (`attention_backends`)."""
        with attention_backends(tokens.device):
            return self._step(tokens)

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        w, t = self.w, self.step_index
        rows, sentences, heads, head_dim = tokens.shape[0], self.memory.shape[0], w.heads, w.head_dim
        d, mask = heads * head_dim, self.memory_mask
        x = torch.add(w.positions[t], F.embedding(tokens, w.embedding), alpha=w.embed_scale)
        new = self.cache[t]  # [rows, L, 2, H, d_k]
        for index, layer in enumerate(w.layers):
            # Masked self-attention: the new key and value join the cache; the query sees positions 0..t.
            qkv = layer.qkv(x).view(rows, 3, heads, head_dim)
            new[:, index] = qkv[:, 1:]
            keys, values = self.keys[index].narrow(2, 0, t + 1), self.values[index].narrow(2, 0, t + 1)
            attended = F.scaled_dot_product_attention(qkv[:, 0].unsqueeze(2), keys, values)  # [rows, H, 1, d_k]
            x = _add_norm(x, layer.out(attended.reshape(rows, d)), layer.norms[0])
            # Encoder-decoder attention: the beams of a sentence are `beams` queries against its memory.
            query = layer.query(x).view(sentences, -1, heads, head_dim).transpose(1, 2)  # [B, H, beams, d_k]
            keys, values = self.memory_keys[index], self.memory_values[index]
            attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask).transpose(1, 2)
            x = _add_norm(x, layer.cross_out(attended.reshape(rows, d)), layer.norms[1])
            x = _add_norm(x, layer.fc2(layer.activation(layer.fc1(x))), layer.norms[2])
        self.step_index += 1
        return w.lm_head(x)

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep the cache rows `rows` (in this order), and, when given, only the `sentences` of the memory."""
        target = self._view(self._storage[1], rows.numel())
        torch.index_select(self.cache[: self.step_index], 1, rows, out=target[: self.step_index])
        self._storage.reverse()
        self._set_cache(target)
        if sentences is not None:
            self._set_memory(self.memory.index_select(0, sentences))
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, sentences)


def _add_norm(x: torch.Tensor, sublayer: torch.Tensor, norm: tuple) -> torch.Tensor:
    """The paper's post-norm residual: LayerNorm(x + Sublayer(x)); `norm` is (shape, weight, bias, eps)."""
    return F.layer_norm(sublayer.add_(x), *norm)


def available_memory(device: str | torch.device = "cpu") -> int:
    """Bytes of memory this machine can still give: ``MemAvailable`` of ``/proc/meminfo`` (4 GiB where it cannot be
    read), or a CUDA device's free memory. What declared sizes and searches are checked against before they
    allocate."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 4 << 30


def check_search_memory(
    config,
    batch: int,
    source: int,
    num_beams: int,
    steps: int,
    device: torch.device | str = "cpu",
    setting: str = "num_beams",
) -> None:
    """Refuse, before the search allocates, a batch whose search memory could not hold: `batch` sentences of up to
    `source` tokens, `num_beams` hypotheses each, up to `steps` output tokens, and each decoder layer's cache (keys
    and values of the outputs and of the sources) of every hypothesis, with a row of logits over the vocabulary. A
    ValueError naming the `setting` that asked for the hypotheses (``num_beams``, or ``num_return_sequences``
    where sampling asks for more) and the sizes, against `available_memory`. ``model.generate()`` runs it before the
    fast decoder allocates (`generation_vanilla_transformer.fast_generate`), ``translate_ids`` before its search."""
    layers = getattr(config, "decoder_layers", None) or getattr(config, "num_hidden_layers", None) or 1
    width = getattr(config, "d_model", None) or getattr(config, "hidden_size", None) or 1
    rows, vocab = batch * num_beams, getattr(config, "vocab_size", None) or 1
    need = 4 * rows * (2 * layers * (steps + source) * width + 3 * vocab) + 3 * 8 * rows * (steps + 1)
    available = available_memory(device)
    if need > available:
        raise ValueError(
            f"the search would hold {need / 1e9:,.1f} GB: {batch} sentences of up to {source} tokens, {setting}="
            f"{num_beams:,} hypotheses each of up to {steps} tokens, {layers} decoder layers; more than the "
            f"{available / 1e9:,.1f} GB of memory available: lower {setting}"
            + (" (--num-beams)" if setting == "num_beams" else "")
            + " or the batch size"
        )


def check_generate_memory(model, inputs, generation_config, kwargs: dict, offset_field: str) -> None:
    """`check_search_memory` for a ``model.generate()`` call, before transformers runs the encoder and repeats its
    inputs and outputs for each of the ``max(num_beams, num_return_sequences)`` hypotheses, where a huge
    ``num_beams`` would exhaust the memory first. The settings are the call's keyword arguments, else those of
    `generation_config` (else the model's); the output length is the least the search could run to (its
    ``max_new_tokens`` or ``max_length``, the longest source + the `offset_field` setting, 1 if none is set), so that
    only what the search would refuse anyway is refused here. A call without a tensor of inputs is left to
    transformers, and so are settings it refuses itself."""
    config = generation_config if generation_config is not None else model.generation_config

    def setting(name: str):
        value = kwargs.get(name)
        return value if value is not None else getattr(config, name, None)

    tensor = inputs if inputs is not None else kwargs.get("input_ids")
    if tensor is None:  # [batch, source, d_model]: its first two sizes are those of the ids it stands for
        tensor = kwargs.get("inputs_embeds")
    if tensor is None and kwargs.get("encoder_outputs") is not None:
        tensor = kwargs["encoder_outputs"][0]
    hypotheses = [setting("num_beams") or 1, setting("num_return_sequences") or 1]
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 2 or not all(type(n) is int for n in hypotheses):
        return
    batch, width = tensor.shape[:2]
    mask = kwargs.get("attention_mask")
    source = int(mask.sum(1).max()) if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.numel() else width
    limits = [getattr(model.config, "max_position_embeddings", None) or 1]
    if setting("max_new_tokens") is not None:
        limits.append(setting("max_new_tokens"))
    elif setting("max_length") is not None:
        limits.append(setting("max_length") - 1)
    else:
        limits.append(1)
    if type(setting(offset_field)) is int:
        limits.append(source + setting(offset_field))
    setting_name = "num_return_sequences" if hypotheses[1] > hypotheses[0] else "num_beams"
    steps = max(min(limits), 1)
    check_search_memory(model.config, batch, width, max(hypotheses), steps, model.device, setting_name)
    check_requested_length(model, batch * max(hypotheses), setting("max_new_tokens"), setting("max_length"))


def check_requested_length(model, rows: int, max_new_tokens, max_length) -> None:
    """Refuse a ``max_new_tokens`` (else ``max_length``) beyond the model's positions whose length transformers'
    search would reserve for all `rows` hypotheses before its first step (its beam search holds each hypothesis's
    tokens at the full length, int64 tensors of ``rows x length``, counted here as one) and the memory could not hold: a ValueError
    naming the argument, the memory and the most the model generates, not the allocator's error for terabytes. The
    fast decoder stops at the positions whatever the argument (`check_search_memory` counts that)."""
    positions = getattr(model.config, "max_position_embeddings", None)
    name, value = ("max_new_tokens", max_new_tokens) if max_new_tokens is not None else ("max_length", max_length)
    if type(value) is not int or positions is None or value <= positions:
        return
    need = 8 * rows * (value + 1)
    available = available_memory(model.device)
    if need > available:
        raise ValueError(
            f"{name}={value:,} is beyond the model's {positions:,} positions, and transformers' search would reserve "
            f"{need / 1e9:,.1f} GB for that length ({rows:,} hypotheses), more than the {available / 1e9:,.1f} GB of "
            f"memory available: pass {name} of at most {positions:,}, the most tokens the model generates"
        )


__all__ = [
    "SDPA_BACKENDS",
    "DecoderWeights",
    "IncrementalDecoder",
    "attention_backends",
    "available_memory",
    "check_generate_memory",
    "check_requested_length",
    "check_search_memory",
    "hooked",
    "incremental_decoder_problem",
    "lora_problem",
    "sdpa_backends",
    "unsupported_modules",
]
