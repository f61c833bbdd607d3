"""A trained model leaving the training run: a Hugging Face model directory (`model_dir`), a CTranslate2 model
(`ctranslate2`), and the Hub, with its model card (`hub`)."""
