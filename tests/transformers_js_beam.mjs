// The page's beam search (search.js of an `export-onnx --web` folder) in Node, on onnxruntime-node through
// transformers.js's sessions:
//   node transformers_js_beam.mjs PACKAGE_DIR SITE_DIR BEAMS '["sentence", ...]'
// prints the token ids of each translation, as JSON. Nothing is fetched: remote models are off.
import { pathToFileURL } from 'node:url';

const [packageDir, siteDir, beams, sentences] = process.argv.slice(2);
const { env, Tensor, AutoTokenizer, AutoModelForSeq2SeqLM } = await import(
  pathToFileURL(`${packageDir}/dist/transformers.node.mjs`).href
);
const { translateIds } = await import(pathToFileURL(`${siteDir}/search.js`).href);
env.allowRemoteModels = false;
env.allowLocalModels = true;

const tokenizer = await AutoTokenizer.from_pretrained(siteDir);
const model = await AutoModelForSeq2SeqLM.from_pretrained(siteDir, { dtype: 'fp32', device: 'cpu' });
const tensor = (type, data, dims) => new Tensor(type, data, dims).ort_tensor;
const results = [];
for (const text of JSON.parse(sentences)) {
  const inputIds = Array.from(tokenizer(text).input_ids.data, Number);
  const { tokens } = await translateIds(model, tensor, inputIds, { k: Number(beams) });
  results.push(tokens);
}
console.log(JSON.stringify(results));
