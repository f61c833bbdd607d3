// The package's beam search (vanilla_transformer/generation_vanilla_transformer.py: beam_search, Beams), for one
// sentence, on the merged decoder graph as serving/with_onnxruntime.py's OnnxStepDecoder feeds it. Step for step:
// the 2k best extensions of the k live hypotheses; those among the k best that end (</s>, or the sentence's limit)
// join the k best finished ones, scored log P / GNMT's ((5 + |Y|) / 6) ** alpha; the k best others live on. The
// search stops exactly: once k have finished and the best live one, even at the limit, cannot beat the worst of them.
// Used by the page (translate.js) with onnxruntime-web, and by the tests in Node with onnxruntime-node.

export const MASKED = -1.0e9; // transformers' score of an impossible hypothesis, as in the package

export function gnmtPenalty(length, alpha) {
  return ((5 + length) / 6) ** alpha;
}

// Indices of the n largest of `values`, best first (ties: the lower index first, as a stable sort keeps them).
function top(values, n) {
  const order = Array.from(values.keys());
  order.sort((a, b) => values[b] - values[a] || a - b);
  return order.slice(0, n);
}

// log_softmax of row `row` of the logits `data` ([rows, vocab]), in float32 steps as torch computes them.
function logSoftmax(data, row, vocab) {
  const logits = data.subarray(row * vocab, (row + 1) * vocab);
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const shift = Math.fround(max + Math.log(sum));
  return Float32Array.from(logits, (x) => x - shift);
}

// The 2k best extensions of the live hypotheses: {score, beam, token}, best first.
function bestExtensions(logits, vocab, liveScores, k) {
  const n = Math.min(2 * k, vocab);
  const candidates = [];
  for (let beam = 0; beam < k; beam += 1) {
    const logProbs = logSoftmax(logits, beam, vocab);
    for (const token of top(logProbs, n)) {
      candidates.push({ score: Math.fround(logProbs[token] + liveScores[beam]), beam, token });
    }
  }
  return top(candidates.map((c) => c.score), 2 * k).map((i) => candidates[i]);
}

// Those among the k best extensions that end join the k best finished hypotheses (sorted, best first).
function finish(state, candidates, ends, length, penalty) {
  const { k } = state;
  const merged = state.finished.slice();
  for (let i = 0; i < k; i += 1) {
    const c = candidates[i];
    const score = Math.fround(c.score / penalty) + (ends[i] ? 0 : MASKED);
    merged.push({ score, tokens: [...state.live[c.beam], c.token], real: ends[i] });
  }
  state.finished = top(merged.map((f) => f.score), k).map((i) => merged[i]);
}

// The k best extensions that do not end live on; returns the decoder rows they extend.
function liveOn(state, candidates, ends) {
  const keep = top(candidates.map((c, i) => c.score + (ends[i] ? MASKED : 0)), state.k);
  const chosen = keep.map((i) => candidates[i]);
  state.live = chosen.map((c) => [...state.live[c.beam], c.token]);
  state.liveScores = chosen.map((c, i) => Math.fround(c.score + (ends[keep[i]] ? MASKED : 0)));
  return chosen.map((c) => c.beam);
}

function settled(state, length, { alpha, maxLength }) {
  if (maxLength <= length) return true;
  const full = state.finished.every((f) => f.real);
  const best = state.liveScores[0] / gnmtPenalty(alpha > 0 ? maxLength : length, alpha);
  return full && best <= Math.min(...state.finished.map((f) => f.score));
}

// Beam search over `decoder` ({step(tokens) -> Float32Array [k, vocab], select(rows), vocab}). Returns the token
// ids of the best translation, the start token first and </s> last (as generate() returns them), and its score.
export async function beamSearch(decoder, { k, alpha, startId, eosId, maxLength }) {
  const state = {
    k,
    live: Array.from({ length: k }, () => [startId]),
    liveScores: Array.from({ length: k }, (_, i) => (i === 0 ? 0 : MASKED)), // identical at first: extend one
    finished: Array.from({ length: k }, () => ({ score: MASKED, tokens: [], real: false })),
  };
  for (let length = 1; ; length += 1) {
    const logits = await decoder.step(state.live.map((tokens) => tokens[length - 1]));
    const candidates = bestExtensions(logits, decoder.vocab, state.liveScores, k);
    const ends = candidates.map((c) => c.token === eosId || maxLength <= length);
    finish(state, candidates, ends, length, gnmtPenalty(length, alpha));
    const rows = liveOn(state, candidates, ends);
    if (settled(state, length, { alpha, maxLength })) return state.finished[0];
    decoder.select(rows);
  }
}

// serving/with_onnxruntime.py's OnnxStepDecoder: the encoder runs once; each step runs the merged decoder on the last
// token of each of the k rows with the cache it returned; `select` reorders the decoder cache rows (the encoder cache
// is the same in every row of the sentence). `tensor(type, data, dims)` makes an onnxruntime tensor.
export class MergedDecoder {
  static async start({ encoder, decoder, tensor, inputIds, k, layers, heads }) {
    const length = inputIds.length;
    const ids = tensor('int64', BigInt64Array.from(inputIds, BigInt), [1, length]);
    const mask = tensor('int64', new BigInt64Array(length).fill(1n), [1, length]);
    const { last_hidden_state: memory } = await encoder.run({ input_ids: ids, attention_mask: mask });
    const [, , dModel] = memory.dims;
    const self = new MergedDecoder(decoder, tensor, layers);
    self.rows = k;
    self.feeds.encoder_hidden_states = tensor('float32', repeat(memory.data, k), [k, length, dModel]);
    self.feeds.encoder_attention_mask = tensor('int64', new BigInt64Array(k * length).fill(1n), [k, length]);
    self.feeds.use_cache_branch = tensor('bool', Uint8Array.from([0]), [1]);
    for (const name of self.past) self.feeds[name] = tensor('float32', new Float32Array(0), [k, heads, 0, dModel / heads]);
    return self;
  }

  constructor(session, tensor, layers) {
    this.session = session;
    this.tensor = tensor;
    const kinds = ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value'];
    const names = (prefix) => Array.from({ length: layers }, (_, i) => kinds.map((kind) => `${prefix}.${i}.${kind}`));
    this.past = names('past_key_values').flat();
    this.present = names('present').flat();
    this.feeds = {};
  }

  async step(tokens) {
    return this.run(tokens, [tokens.length, 1]);
  }

  // One run on `ids` ([rows, T] as `dims`): the logits, and the outputs (cache, cross_attentions.*) kept in `last`.
  async run(ids, dims) {
    this.feeds.input_ids = this.tensor('int64', BigInt64Array.from(ids, BigInt), dims);
    const outputs = await this.session.run(this.feeds);
    this.past.forEach((name, i) => {
      this.feeds[name] = outputs[this.present[i]];
    });
    this.feeds.use_cache_branch = this.tensor('bool', Uint8Array.from([1]), [1]);
    this.last = outputs;
    this.vocab = outputs.logits.dims[2];
    return outputs.logits.data; // [k, 1, vocab]
  }

  select(rows) {
    for (const name of this.past.filter((n) => n.includes('.decoder.'))) {
      const cache = this.feeds[name];
      this.feeds[name] = this.tensor('float32', gather(cache.data, rows, cache.size / cache.dims[0]), cache.dims);
    }
  }
}

function repeat(data, times) {
  const out = new data.constructor(data.length * times);
  for (let i = 0; i < times; i += 1) out.set(data, i * data.length);
  return out;
}

function gather(data, rows, rowSize) {
  const out = new data.constructor(rows.length * rowSize);
  rows.forEach((row, i) => out.set(data.subarray(row * rowSize, (row + 1) * rowSize), i * rowSize));
  return out;
}

// The paper's search of one sentence (`inputIds`, </s> included) with transformers.js's `model` sessions: beam `k`,
// alpha and the limit (input length + offset, below max_position_embeddings) as the package's translate() sets them.
export async function translateIds(model, tensor, inputIds, { k, alpha = 0.6, offset = 50 }) {
  const { config } = model;
  const decoder = await MergedDecoder.start({
    encoder: model.sessions.model,
    decoder: model.sessions.decoder_model_merged,
    tensor,
    inputIds,
    k,
    layers: config.decoder_layers,
    heads: config.decoder_attention_heads,
  });
  const maxLength = Math.min(inputIds.length + offset, config.max_position_embeddings);
  const startId = config.decoder_start_token_id;
  const best = await beamSearch(decoder, { k, alpha, startId, eosId: config.eos_token_id, maxLength });
  return { tokens: best.tokens, decoder };
}

// The cross-attention of the translation `tokens` (start token first) over the source `inputIds`: one run of the
// merged decoder on the whole translation, no cache. `layers[l][h]` is [output token][source token]: the weights
// with which each output token was predicted (the input ends before the last token).
export async function crossAttention(model, tensor, inputIds, tokens) {
  const { config } = model;
  const layers = config.decoder_layers;
  const decoder = await MergedDecoder.start({
    encoder: model.sessions.model,
    decoder: model.sessions.decoder_model_merged,
    tensor,
    inputIds,
    k: 1,
    layers,
    heads: config.decoder_attention_heads,
  });
  const input = tokens.slice(0, -1);
  await decoder.run(input, [1, input.length]);
  return Array.from({ length: layers }, (_, i) => splitHeads(decoder.last[`cross_attentions.${i}`]));
}

// [1, H, T, S] -> H arrays of T rows of S numbers.
function splitHeads({ data, dims }) {
  const [, heads, rows, cols] = dims;
  return Array.from({ length: heads }, (_, h) =>
    Array.from({ length: rows }, (_, t) => Array.from(data.subarray((h * rows + t) * cols, (h * rows + t + 1) * cols))),
  );
}
