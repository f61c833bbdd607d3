"""A trained model leaving the package: the Hub with its model card (`hub`), a CTranslate2 model (`ctranslate2`) and a
plain MarianMT directory (`marian`). Saving and loading a model directory is `vanilla_transformer.model_dir`."""
