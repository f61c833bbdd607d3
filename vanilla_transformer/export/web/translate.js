// Translation in the browser with the package's beam search (search.js) on onnxruntime-web (wasm): transformers.js
// gives the tokenizer and loads the two graphs; the model and the runtime are served from this page's own folder
// (written by `vanilla-transformer export-onnx --web`).
import { env, Tensor, AutoTokenizer, AutoModelForSeq2SeqLM } from './js/transformers.min.js';
import { crossAttention, translateIds } from './search.js';
import { hideAttention, showAttention } from './attention.js';

const VERSIONS = {{versions}};
const here = new URL('./', import.meta.url);
env.allowRemoteModels = false; // never the Hugging Face Hub
env.allowLocalModels = true;
env.useBrowserCache = false;
env.backends.onnx.wasm.wasmPaths = {
  mjs: new URL('js/ort-wasm-simd-threaded.asyncify.mjs', here).href,
  wasm: new URL('js/ort-wasm-simd-threaded.asyncify.wasm', here).href,
};
env.backends.onnx.wasm.numThreads = 1; // threads need cross-origin isolation, which a static host may not give

const MODEL = '.'; // not a Hub id: transformers.js fetches ./config.json, ... relative to this page
const element = (id) => document.getElementById(id);
const [status, button, source, output, beams] = ['status', 'translate', 'source', 'output', 'beams'].map(
  (name) => element(`vt-${name}`),
);
const tensor = (type, data, dims) => new Tensor(type, data, dims).ort_tensor;

async function load() {
  const started = performance.now();
  const tokenizer = await AutoTokenizer.from_pretrained(MODEL);
  const model = await AutoModelForSeq2SeqLM.from_pretrained(MODEL, { dtype: 'fp32', device: 'wasm' });
  const generation = await (await fetch(new URL('generation_config.json', here))).json();
  const search = {
    alpha: generation.length_penalty_type === 'gnmt' ? generation.length_penalty : 0.6,
    offset: generation.max_length_offset ?? 50,
  };
  const width = Math.min(8, Math.max(1, generation.num_beams ?? 4));
  return { tokenizer, model, search, width, ms: performance.now() - started };
}

// The paper's search (beam `k`, GNMT length penalty, input length + 50) of `text`, as the package's translate().
async function translate({ tokenizer, model, search }, text, k) {
  const started = performance.now();
  const inputIds = Array.from(tokenizer(text).input_ids.data, Number);
  const { tokens, decoder } = await translateIds(model, tensor, inputIds, { ...search, k });
  const translation = tokenizer.decode(tokens, { skip_special_tokens: true });
  return { tokens, inputIds, text: translation, ms: performance.now() - started };
}

// The attention view of the chosen translation, its tokens shown as the tokenizer spells them.
async function showTranslationAttention({ tokenizer, model }, { inputIds, tokens }) {
  const attention = await crossAttention(model, tensor, inputIds, tokens);
  const spell = (ids) => ids.map((id) => tokenizer.decode([id], { skip_special_tokens: false }));
  showAttention(attention, spell(inputIds), spell(tokens.slice(1)));
}

function clear() {
  output.value = '';
  delete output.dataset.tokens;
  hideAttention();
}

async function onTranslate(loaded) {
  const text = source.value.trim();
  if (!text) {
    clear();
    status.textContent = 'Enter a sentence to translate: the text box is empty.';
    return;
  }
  const k = Number(beams.value);
  if (!Number.isInteger(k) || k < 1 || k > 8) {
    status.textContent = 'The beam width is a whole number from 1 to 8.';
    return;
  }
  button.disabled = true;
  clear();
  status.textContent = 'Translating…';
  try {
    const result = await translate(loaded, text, k);
    output.value = result.text;
    await showTranslationAttention(loaded, result);
    output.dataset.tokens = JSON.stringify(result.tokens); // last: the translation and its view are shown
    status.textContent = `Translated with beam ${k} in ${Math.round(result.ms)} ms.`;
  } catch (error) {
    status.textContent = `Translation failed: ${error}`;
  } finally {
    button.disabled = false;
  }
}

load().then((loaded) => {
  beams.value = String(loaded.width);
  const seconds = (loaded.ms / 1000).toFixed(1);
  status.textContent = `Ready: the model loaded in ${seconds} s (transformers.js ${VERSIONS['transformers.js']}, onnxruntime-web ${VERSIONS['onnxruntime-web']}, wasm).`;
  button.disabled = false;
  button.addEventListener('click', () => onTranslate(loaded));
  source.addEventListener('input', () => {
    if (!source.value.trim()) clear();
  });
}, (error) => {
  status.textContent = `The model did not load: ${error}`;
});
