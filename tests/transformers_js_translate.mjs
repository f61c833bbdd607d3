// Greedy translation with transformers.js in Node (onnxruntime-node), from an ONNX folder of export-onnx:
//   node transformers_js_translate.mjs PACKAGE_DIR MODEL_DIR '["sentence", ...]'
// prints the token ids of each translation, as JSON. Nothing is fetched: remote models are off, and the model is a
// folder path, not a Hub id.
import { pathToFileURL } from 'node:url';

const [packageDir, modelDir, sentences] = process.argv.slice(2);
const { env, AutoTokenizer, AutoModelForSeq2SeqLM } = await import(
  pathToFileURL(`${packageDir}/dist/transformers.node.mjs`).href
);
env.allowRemoteModels = false;
env.allowLocalModels = true;

const tokenizer = await AutoTokenizer.from_pretrained(modelDir);
const model = await AutoModelForSeq2SeqLM.from_pretrained(modelDir, { dtype: 'fp32', device: 'cpu' });
const results = [];
for (const text of JSON.parse(sentences)) {
  const inputs = tokenizer(text);
  const ids = await model.generate({ ...inputs, max_new_tokens: inputs.input_ids.dims[1] + 50, num_beams: 1, do_sample: false });
  results.push(Array.from(ids.tolist()[0], Number));
}
console.log(JSON.stringify(results));
