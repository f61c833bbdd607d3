"""The step decoders the package's search runs on, and `step_decoder`, the router that picks one for a model (a
`generation_vanilla_transformer.StepDecoder`: one step of logits, and selecting rows).

This package's model decodes on its fast `IncrementalDecoder` wherever that computes what the model computes, by
the rule ``generate()`` follows too (`decoder_vanilla_transformer.incremental_decoder_problem`, in the remote-code
files); an ONNX folder on its own decoder (``serving.with_onnxruntime.OnnxStepDecoder``); any other Hugging Face
encoder-decoder with a generation cache (MarianMT, BART, T5, a PEFT-wrapped model, ours with a hook or dropping out
in training mode) on `CachedStepDecoder`, one forward pass of the model per step. Either way the search is the same
code: ``generation_vanilla_transformer.beam_search``.
"""

from __future__ import annotations

import torch
from transformers.modeling_outputs import BaseModelOutput

from ..cache_vanilla_transformer import cache_field
from ..decoder_vanilla_transformer import DecoderWeights, IncrementalDecoder, incremental_decoder_problem
from ..generation_vanilla_transformer import StepDecoder


class CachedStepDecoder:
    """`StepDecoder` for any Hugging Face encoder-decoder whose generation cache has ``reorder_cache``: the encoder
    runs once, then each step is one forward pass of the decoder on the last token of every row, with the cache.

    Row ``b * beams + j`` is hypothesis j of sentence b; the encoder output and mask are repeated for each row,
    as transformers' own beam search does."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, beams: int):
        self.model, self.cache, self.cache_name = model, None, cache_field()
        sentence_of_row = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(beams)
        encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        self.encoded = encoded.index_select(0, sentence_of_row)  # [rows, S, d]
        self.memory_mask = attention_mask.index_select(0, sentence_of_row)  # [rows, S]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` of the next token after `tokens` ``[rows]``."""
        outputs = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=self.encoded),
            attention_mask=self.memory_mask,
            decoder_input_ids=tokens.unsqueeze(1),
            use_cache=True,
            **{self.cache_name: self.cache},
        )
        self.cache = getattr(outputs, self.cache_name)
        if self.cache is None or not hasattr(self.cache, "reorder_cache"):
            raise TypeError(
                f"{type(self.model).__name__} returned no generation cache with reorder_cache as {self.cache_name!r}: "
                f"the beam search needs one"
            )
        return outputs.logits[:, -1]

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep the rows `rows`: the cache, by its public ``reorder_cache``, and the encoder output and mask, which
        follow the rows (each kept row continues a row of its own sentence, so `sentences` adds nothing).

        The rows of a sentence hold the same encoder output, so while no sentence leaves the batch (as many rows
        kept as there are), reordering them changes nothing there and the copy is skipped."""
        self.cache.reorder_cache(rows)
        if rows.numel() != self.encoded.shape[0]:  # sentences finished: their rows go
            self.encoded = self.encoded.index_select(0, rows)
            self.memory_mask = self.memory_mask.index_select(0, rows)


def step_decoder(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, beams: int, max_steps: int
) -> StepDecoder:
    """The decoder of one search over the right-padded sources `input_ids`, `beams` rows per sentence: the model's
    own where it brings one (a ``step_decoder`` method: an ONNX folder served by onnxruntime,
    ``serving.with_onnxruntime.OnnxSeq2SeqModel``); this package's `IncrementalDecoder` where it computes what the
    model does (`incremental_decoder_problem`: our model, dropping nothing, without hooks or adapters other than
    plain LoRA); else `CachedStepDecoder`."""
    if callable(getattr(model, "step_decoder", None)):
        return model.step_decoder(input_ids, attention_mask, beams, max_steps)
    if not incremental_decoder_problem(model):
        memory = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return IncrementalDecoder(DecoderWeights.of(model), memory, attention_mask, beams, max_steps)
    return CachedStepDecoder(model, input_ids, attention_mask, beams)


__all__ = ["CachedStepDecoder", "step_decoder"]
