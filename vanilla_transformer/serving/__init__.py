"""Serving a model: the package's search, the step decoders it runs on, and the engines that run an exported folder.

* `search`: the paper's beam search as the package runs it for any model: its settings
  (`paper_generation_config`) and their checks, `translate`, `translate_ids` and `trace_beam_search`;
* `step_decoders`: `step_decoder`, the router that picks the decoder one search runs on, and `CachedStepDecoder`
  (any Hugging Face encoder-decoder); this package's fast decoder is the remote-code ``decoder_vanilla_transformer``;
* `with_onnxruntime`: an ONNX folder served by onnxruntime (`load_onnx`), on which the same search runs;
* `with_ctranslate2`: a CTranslate2 folder, on which CTranslate2's C++ beam search runs the paper's search
  (`load_translator`, `search_ctranslate2`, `translate_ctranslate2`).

Writing those folders is `vanilla_transformer.export`; serving never writes one.
"""
