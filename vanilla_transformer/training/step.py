"""The pieces of an optimizer step: teacher-forced logits, gradient accumulation over micro-batches and processes,
and compiling.

`Trainer.train_step` takes the step of ``vanilla-transformer train`` from them. With Accelerate's dynamo plugin on
(``--dynamo-backend``, ``accelerate launch --dynamo_backend``, or ``accelerate config``), `Accelerator.prepare`
compiles the model and `compiled_loss` the loss with the same settings; `compile_count` says how many graphs were
compiled, so that recompilation shows in the run's log.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch
from accelerate import Accelerator
from accelerate.utils import DynamoBackend

from ..data import IGNORE_INDEX
from ..modeling_vanilla_transformer import shift_tokens_right, token_cross_entropy
from .config import OptimizationConfig, TrainingConfig
from .logs import get_logger

LossFunction = Callable[..., torch.Tensor]
"""``(logits [B, T, V], labels [B, T], divisor, label_smoothing=...) -> loss``, as `token_cross_entropy`."""

logger = get_logger(__name__)

# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def teacher_forced_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Teacher-forced logits ``[B, T, V]``: the decoder reads the labels shifted right behind the start token.

    No key-value cache (``use_cache=False``): training never reads one, and a decoder layer compiled on its own
    (regional compilation) that is given one guards on the cache's state for its own layer index, so each decoder
    layer got its own graph instead of one for all (issue 47: 3 of a warm start's 5 layer traces with N=3)."""
    config = getattr(model, "module", model).config
    decoder_input_ids = shift_tokens_right(batch["labels"], config.pad_token_id, config.decoder_start_token_id)
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        decoder_input_ids=decoder_input_ids,
        use_cache=False,
    ).logits


def accumulate_gradients(
    accelerator: Accelerator,
    model,
    micro_batches: Sequence[dict[str, torch.Tensor]],
    label_smoothing: float,
    loss_function: LossFunction = token_cross_entropy,
) -> dict[str, torch.Tensor]:
    """Forward and backward the micro-batches of one optimizer step (this process's share of it).

    The gradients left in ``.grad`` are those of the step's loss: the sum of the label-smoothed cross-entropy of
    all its target tokens divided by their number N, over the micro-batches of all processes. Each process divides
    its sum by its share N / P, because DDP averages the gradients of the P processes; the gradients are
    all-reduced once, after the last micro-batch.

    Returns:
        This process's summed ``loss``, its ``target_tokens``, its real (non-padding) source + target ``tokens``
        and its padded ``positions``, as tensors, for logging.
    """
    target_tokens = sum((batch["labels"] != IGNORE_INDEX).sum() for batch in micro_batches)
    step_tokens = accelerator.reduce(target_tokens, "sum")
    share = step_tokens / accelerator.num_processes
    summed_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    model.train()
    with specialized_floats(accelerator):
        for index, batch in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            with nullcontext() if last else accelerator.no_sync(model):
                loss = loss_function(
                    teacher_forced_logits(model, batch), batch["labels"], share, label_smoothing=label_smoothing
                )
                accelerator.backward(loss)
            summed_loss += loss.detach().double() * share
    return {
        "loss": summed_loss,
        "target_tokens": target_tokens.double(),
        "tokens": sum(
            batch["attention_mask"].sum() + (batch["labels"] != IGNORE_INDEX).sum() for batch in micro_batches
        ).double(),
        "positions": torch.tensor(
            float(sum(batch["input_ids"].numel() + batch["labels"].numel() for batch in micro_batches)),
            dtype=torch.float64,
            device=accelerator.device,
        ),
    }


def loss_scale(accelerator: Accelerator) -> float | None:
    """The fp16 loss scaler's scale (reading it waits for the device), None without loss scaling. Read before and
    after the optimizer step: `overflow_skipped`."""
    scaler = accelerator.scaler
    return None if scaler is None else scaler.get_scale()


def overflow_skipped(accelerator: Accelerator, scale_before: float | None) -> bool:
    """Whether fp16 loss scaling skipped the optimizer step just taken, given the scale before it (`loss_scale`).

    The scaler lowers its scale exactly when it finds infinite or NaN gradients, and then skips the update.
    Accelerate's own flag (``optimizer_step_was_skipped``) tells only where the scaler skips the optimizer's
    ``step`` call: an optimizer that takes the scaler's inf check into its kernels (fused Adam, which
    ``--adam-implementation auto`` picks on CUDA) is always called and skips the update itself, so the flag said
    "taken" and an overflowing step was counted (issue 55)."""
    if scale_before is None:
        return False
    return accelerator.scaler.get_scale() < scale_before


MEMORY_SHARE = 0.8
"""The share of a GPU's free memory that `tokens_in_memory` lets micro-batches plan for: the rest is the allocator's
fragmentation and what the estimate misses."""


def activation_bytes_per_token(model_config, eager_attention: bool, max_length: int) -> int:
    """An upper estimate of the bytes a training step keeps per padded token until its backward pass, in float32:
    the values a layer saves (about 10 d_model + 3 d_ff per position in an encoder layer, 16 d_model + 3 d_ff in a
    decoder layer with its cross-attention), for the costlier stack, as a token is a source or a target token; the
    logits, their log-softmax and its gradient (3 x the vocabulary); with eager attention, its scores, weights and
    dropout mask (3 x heads x the longest length, for each attention call). Against the one measurement (an H200,
    base, bf16, 37,000 vocabulary: a 6.6 GiB peak at 12,500 tokens a micro-batch, issue 55), it says 9.9 GB."""
    d, config = model_config.d_model, model_config
    encoder = config.encoder_layers * (10 * d + 3 * config.encoder_ffn_dim)
    decoder = config.decoder_layers * (16 * d + 3 * config.decoder_ffn_dim)
    values = max(encoder, decoder) + 3 * config.vocab_size
    if eager_attention:
        heads = max(config.encoder_attention_heads, config.decoder_attention_heads)
        values += 3 * heads * max_length * max(config.encoder_layers, 2 * config.decoder_layers)
    return 4 * values


def micro_batch_plan(config: TrainingConfig, num_processes: int, memory_tokens: int | None = None) -> tuple[int, int]:
    """The micro-batch size in padded tokens and the micro-batches per step and process (gradient accumulation).

    With ``--grad-accum`` (or without ``--tokens-per-step``): ``--max-tokens`` and ``--grad-accum`` (1) as given.
    Otherwise each process's share of ``--tokens-per-step``, ``S = tokens_per_step / num_processes``, is cut into the
    fewest micro-batches of at most ``--max-tokens``: ``ceil(S / max_tokens)`` micro-batches of ``floor(S / that)``
    tokens. So ``wmt14-base`` (50,000 tokens, at most 12,500) takes 4 micro-batches of 12,500 on one process, 1 of
    6,250 on 8 and 1 of 781 on 64. A micro-batch never gets smaller than the longest pair ``--max-length`` allows
    (``2 * max_length``), which exceeds the target when ``S`` is smaller than that. With ``--fill-gpu-memory``
    the most per micro-batch is the larger of ``--max-tokens`` and `memory_tokens`, what the device holds.
    """
    optimization, max_length = config.optimization, config.data.max_length
    if optimization.grad_accum is not None or optimization.tokens_per_step is None:
        return optimization.max_tokens, optimization.grad_accum or 1
    most = optimization.max_tokens
    if optimization.fill_gpu_memory and memory_tokens is not None:
        most = max(most, memory_tokens)
    share = optimization.tokens_per_step / num_processes
    grad_accum = max(1, math.ceil(share / most))
    return max(2 * max_length, min(most, int(share // grad_accum))), grad_accum


STEP_BYTES_PER_TOKEN = 8
"""Bytes a padded token of a step's micro-batches holds at least while the step runs: one int64 id (a source token
also has its attention mask, and the step's micro-batches are all held until it ends), a lower bound."""


def check_step_memory(tokens: int, micro_batches: int, device: torch.device | str, source: str) -> None:
    """Refuse, before any step, a micro-batch plan whose step (`micro_batches` of `tokens` padded tokens on this
    process, held together) memory cannot hold by `STEP_BYTES_PER_TOKEN` alone: such a step would gather batches
    until the machine runs out of memory. One line naming `source`, the setting that asked for it."""
    from ..environment import available_memory

    need, available = tokens * micro_batches * STEP_BYTES_PER_TOKEN, available_memory(device)
    if need > available:
        raise ValueError(
            f"{source} asks for steps of {micro_batches:,} micro-batches of {tokens:,} tokens on each process: at "
            f"least {need / 1e9:,.1f} GB of token ids held at once, more than the {available / 1e9:,.1f} GB of memory "
            "available here"
        )


def plan_source(config: TrainingConfig) -> str:
    """The option that sets a run's micro-batch plan, as given (``--tokens-per-step=50000``), for `check_step_memory`."""
    optimization = config.optimization
    if optimization.grad_accum is not None or optimization.tokens_per_step is None:
        return f"--grad-accum={optimization.grad_accum or 1} with --max-tokens={optimization.max_tokens}"
    return f"--tokens-per-step={optimization.tokens_per_step}"


def tokens_in_memory(accelerator: Accelerator, model: torch.nn.Module, max_length: int) -> int | None:
    """The most padded tokens a micro-batch of `model`'s training may hold on this device's free memory (the smallest
    over the processes, which must agree on the plan), by `activation_bytes_per_token`, after the weights, their
    gradients and Adam's two moments (16 bytes a parameter); None off CUDA, where it is not known."""
    if accelerator.device.type != "cuda":
        return None
    free = torch.cuda.mem_get_info(accelerator.device)[0] * MEMORY_SHARE - 16 * model.num_parameters()
    eager = model.config._attn_implementation == "eager"
    tokens = max(0, int(free // activation_bytes_per_token(model.config, eager, max_length)))
    if accelerator.num_processes == 1:
        return tokens
    return -int(accelerator.reduce(torch.tensor(-tokens, device=accelerator.device), "max"))  # the smallest


def adam_kernels(choice: str, device_type: str) -> dict[str, bool]:
    """``torch.optim.Adam``'s keyword arguments for ``--adam-implementation`` `choice`: the same update by fused
    kernels (one for all parameters), foreach kernels (one per operation) or a loop over the parameters. ``auto``
    is fused on CUDA, where each kernel launch counts, and torch's default elsewhere (on the CPU, fused Adam ran
    0.97x as fast as the default, within the noise: docs/performance.md)."""
    if choice == "auto":
        return {"fused": True} if device_type == "cuda" else {}
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[choice]


def build_adam(model: torch.nn.Module, optimization: OptimizationConfig, device_type: str) -> torch.optim.Adam:
    """Section 5.3's Adam over `model`'s parameters, with the betas, epsilon and kernels of the optimization
    settings; the learning rate is the schedule's."""
    return torch.optim.Adam(
        model.parameters(),
        betas=(optimization.adam_beta1, optimization.adam_beta2),
        eps=optimization.adam_eps,
        **adam_kernels(optimization.adam_implementation, device_type),
    )


# --------------------------------------------------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------------------------------------------------


def compiling(accelerator: Accelerator) -> bool:
    """Whether Accelerate's dynamo plugin is on: `Accelerator.prepare` then compiles the model."""
    return accelerator.state.dynamo_plugin.backend != DynamoBackend.NO


def prefer_compile_settings(accelerator: Accelerator) -> None:
    """Compile for any batch shape, and each repeated layer once (regional compilation), unless the launcher chose
    (``accelerate launch --dynamo_use_dynamic``, ``--dynamo_use_regional_compilation``: the launcher sets both, off
    where not given, whenever it sets a backend).

    Token batches of similar-length pairs vary in both sentences and length from step to step. Left to decide,
    torch compiles the first shape statically, then again with dynamic sizes; asking for dynamic shapes at once
    saves that second compilation. Regional compilation (Accelerate's `compile_regions`, PyTorch's recipe) compiles
    the encoder and decoder layers one by one, each class's graph once for all its layers (the rest runs eagerly:
    `compile_layers_only`): less for the compiler to do, and mixed precision's autocast then stays outside the
    graphs, which lets torch's AOTAutograd cache keep them (a graph holding autocast is never cached).
    Call before `Accelerator.prepare`, which reads the plugin.
    """
    plugin = accelerator.state.dynamo_plugin
    if not compiling(accelerator):
        return
    if plugin.dynamic is None:
        plugin.dynamic = True
    if "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION" not in os.environ:
        plugin.use_regional_compilation = True


class VectorISAProbe:
    """Inductor's check of the vector instruction sets its C++ kernels may use, run in a thread from the start of a
    run that compiles on the CPU, so that its waits overlap the data and the model being prepared.

    Before its first CPU graph, inductor tries each instruction set the CPU's flags list (AVX-512 VNNI, AVX-512,
    AVX2 on the AMD EPYC here): it builds a small library once (kept in its cache) and, at every process start,
    loads it in a child Python, twice per set: six child processes, 1.1 to 1.3 s at each warm start on this 2-core
    machine (issue 47), nearly all of it waiting on the children, without Python's lock. The thread asks inductor's
    own cached function (`torch._inductor.cpu_vec_isa.pick_vec_isa`, private), so the compiler later finds the
    answer it would have computed; where this torch has no such function, the thread does nothing and the compiler
    checks as before.
    """

    def __init__(self) -> None:
        self.thread = threading.Thread(target=self._probe, name="inductor-vector-isa-probe", daemon=True)
        self.thread.start()

    @staticmethod
    def _probe() -> None:
        try:
            from torch._inductor.cpu_vec_isa import pick_vec_isa
        except ImportError:
            return
        try:
            pick_vec_isa()
        except Exception:  # the compiler's own call checks again and reports
            return

    @classmethod
    def start(cls, accelerator: Accelerator) -> VectorISAProbe | None:
        """The probe, started, where `accelerator` compiles on the CPU; else None."""
        if not compiling(accelerator) or accelerator.device.type != "cpu":
            return None
        return cls()

    def wait(self) -> None:
        """Let the probe finish before the compiler needs its answer (else both would probe)."""
        self.thread.join()


def compile_layers_only(model: torch.nn.Module) -> int:
    """Undo, in a model that Accelerate's regional compilation returned, the compilation of every module but the
    repeated layers (the members of a `ModuleList` of one class: the encoder and decoder layers); returns how many
    modules it left compiled.

    `compile_regions` compiles each other leaf on its own as well (embeddings, dropout, positional encoding, final
    layer norms, output projection): one or two operations each, nothing for the compiler to fuse, yet each its own
    trace, guarded on the module's class, so all of them share (and recompile) one wrapper function. Run eagerly,
    they compute the same, and the compile phase, cold and warm, skips their traces. Nothing has been traced yet
    (torch.compile traces at the first call), so nothing compiled is thrown away. A model compiled whole is left
    as it is. (`OptimizedModule` and its ``_orig_mod`` are private; Accelerate relies on both too.)
    """
    compiled = torch._dynamo.eval_frame.OptimizedModule
    kept = 0
    for parent in list(model.modules()):
        repeated = isinstance(parent, torch.nn.ModuleList) and len({type(child) for child in parent}) == 1
        for name, child in list(parent.named_children()):
            if not isinstance(child, compiled):
                continue
            if repeated:
                kept += 1
                continue
            original = getattr(child, "_orig_mod", None)  # where torch.compile keeps the module (private)
            if not isinstance(original, torch.nn.Module):  # an unknown torch: every region stays compiled
                logger.warning(
                    f"torch {torch.__version__} keeps no _orig_mod in a compiled module: every region Accelerate "
                    "compiled stays compiled (the same results, a longer compile phase)",
                    main_process_only=True,
                )
                return sum(isinstance(module, compiled) for module in model.modules())
            setattr(parent, name, original)
    return kept


def specialized_floats(accelerator: Accelerator) -> AbstractContextManager:
    """Where the dynamo plugin is on, a context in which torch.compile takes the step's Python floats as constants.

    The floats the compiled code reads are settings, fixed for the run: dropout rates, layer-norm epsilons, the label
    smoothing. Compiling for dynamic shapes, torch first makes each float an input of the graph, then, when one
    reaches an operation that needs a number, throws the trace away and traces the frame again with that float
    constant ("Restarting analysis due to ... _tensorify_python_scalars"): every region traced twice, cold and warm
    (the first trace misses the AOTAutograd cache under a key it never writes: the "5 of 14 graphs never cached" of
    issue 47, half of a warm start's compile phase). Taking floats as constants at once
    (``torch._dynamo.config.specialize_float``, private: checked here and by the tests) saves the second trace; none
    recompiles, the floats being fixed (the loss's divisor is a tensor).
    """
    if not compiling(accelerator):
        return nullcontext()
    config = torch._dynamo.config
    if not hasattr(config, "specialize_float"):  # an unknown torch: the second trace is its cost, the results the same
        logger.warning(
            f"torch {torch.__version__} has no torch._dynamo.config.specialize_float: compiling traces each region "
            "twice (the same results, a longer compile phase)",
            main_process_only=True,
        )
        return nullcontext()
    return config.patch(specialize_float=True)


def compiled_loss(accelerator: Accelerator) -> LossFunction:
    """`token_cross_entropy`, compiled with the model's settings when the dynamo plugin is on: the log-softmax and
    label smoothing over ``[B*T, V]`` logits then fuse into a few kernels."""
    if not compiling(accelerator):
        return token_cross_entropy
    return torch.compile(token_cross_entropy, **accelerator.state.dynamo_plugin.to_kwargs())


def compile_count() -> int | None:
    """Graphs compiled by torch.compile in this process so far; None where this version of torch does not say.

    torch keeps the count in ``torch._dynamo.utils.counters["stats"]["unique_graphs"]`` (private, checked by the
    tests on the supported torch versions).
    """
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    if not isinstance(counters, dict):
        return None
    return int(counters.get("stats", {}).get("unique_graphs", 0))  # no "stats" before the first compilation
