// Translation in the browser: transformers.js and onnxruntime-web (wasm), the model and the runtime all served
// from this page's own folder (written by `vanilla-transformer export-onnx --web`).
import { env, AutoTokenizer, AutoModelForSeq2SeqLM } from './js/transformers.min.js';

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
const status = document.getElementById('vt-status');
const button = document.getElementById('vt-translate');
const source = document.getElementById('vt-source');
const output = document.getElementById('vt-output');

async function load() {
  const tokenizer = await AutoTokenizer.from_pretrained(MODEL);
  const model = await AutoModelForSeq2SeqLM.from_pretrained(MODEL, { dtype: 'fp32', device: 'wasm' });
  const response = await fetch(new URL('generation_config.json', here));
  const generation = await response.json();
  return { tokenizer, model, offset: generation.max_length_offset ?? 50 };
}

async function translate({ tokenizer, model, offset }, text) {
  const inputs = tokenizer(text);
  const length = inputs.input_ids.dims[1];
  const limit = Math.min(length + offset, model.config.max_position_embeddings - 1);
  const started = performance.now();
  // Section 6.1's limit (input length + offset), greedily: num_beams 1, whatever generation_config.json says.
  const ids = await model.generate({ ...inputs, max_new_tokens: limit, num_beams: 1, do_sample: false });
  const tokens = Array.from(ids.tolist()[0], Number);
  return { tokens, text: tokenizer.decode(tokens, { skip_special_tokens: true }), ms: performance.now() - started };
}

load().then((loaded) => {
  status.textContent = `Ready (transformers.js ${VERSIONS['transformers.js']}, onnxruntime-web ${VERSIONS['onnxruntime-web']}, wasm).`;
  button.disabled = false;
  button.addEventListener('click', async () => {
    const text = source.value.trim();
    if (!text) {
      status.textContent = 'Enter a sentence to translate: the text box is empty.';
      return;
    }
    button.disabled = true;
    status.textContent = 'Translating…';
    try {
      const result = await translate(loaded, text);
      output.value = result.text;
      output.dataset.tokens = JSON.stringify(result.tokens);
      status.textContent = `Translated greedily in ${Math.round(result.ms)} ms.`;
    } catch (error) {
      status.textContent = `Translation failed: ${error}`;
    } finally {
      button.disabled = false;
    }
  });
}, (error) => {
  status.textContent = `The model did not load: ${error}`;
});
