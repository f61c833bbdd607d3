"""The paper's beam search written for reading, as an oracle for the tests: never imported by the library.

One sentence, one hypothesis at a time, every step a full forward pass of the model over the source and the whole
prefix (no cache, no batching), and no early stop (it runs to the maximum length). Section 6.1 with GNMT's penalty:

1. Extend each of the k live hypotheses by every token; keep the 2k best extensions by log P.
2. Those among the k best that end (``</s>``, or the maximum length) finish, scored log P / ((5 + |Y|) / 6) ** alpha.
3. The k best others live on.
4. The answer is the best finished hypothesis.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def gnmt_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha, Wu et al. (2016), equation 14."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def next_token_log_probs(model, source: list[int], prefix: list[int]) -> list[float]:
    """log P(token | source, prefix) for every token of the vocabulary, by one full forward pass."""
    logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([prefix])).logits
    return F.log_softmax(logits[0, -1].float(), dim=-1).tolist()


def beam_search(model, source: list[int], num_beams: int, alpha: float, max_length: int) -> list[int]:
    """The generated tokens (without the start token) of the best hypothesis for `source`, at most `max_length`."""
    start, eos = model.config.decoder_start_token_id, model.config.eos_token_id
    live = [(0.0, [])]  # (log P, generated tokens)
    finished = []  # (score, generated tokens)
    for length in range(1, max_length + 1):
        extensions = []
        for log_prob, tokens in live:
            for token, token_log_prob in enumerate(next_token_log_probs(model, source, [start, *tokens])):
                extensions.append((log_prob + token_log_prob, [*tokens, token]))
        extensions.sort(key=lambda extension: -extension[0])
        extensions = extensions[: 2 * num_beams]
        live = []
        for rank, (log_prob, tokens) in enumerate(extensions):
            ends = tokens[-1] == eos or length == max_length
            if ends and rank < num_beams:
                finished.append((log_prob / gnmt_penalty(length, alpha), tokens))
            elif not ends and len(live) < num_beams:
                live.append((log_prob, tokens))
    return max(finished)[1]
