"""The "translation" and "text2text-generation" pipelines, for encoder-decoder models such as the vanilla Transformer.

transformers 5 removed both tasks from `transformers.pipeline` (asking for them raises a KeyError). A task that a
model's config.json lists under ``custom_pipelines`` is looked up there first, though, so a model directory that holds
this file and that entry (`vanilla_transformer.model_dir.add_pipeline_support` writes both) gets them back,
with remote code:

```python
>>> from transformers import pipeline
>>> translator = pipeline("translation", model="path/to/model", trust_remote_code=True)
>>> translator(["three hundred and twelve", "seven"], batch_size=2)
[{'translation_text': 'dreihundertzwölf'}, {'translation_text': 'sieben'}]
```

Generation follows the model's generation config (generation_config.json: beam size, length penalty, maximum
length); keyword arguments of a call, such as ``num_beams=1``, override it. The outputs have the format of the
transformers 4 pipelines: one ``{"translation_text": ...}`` (or ``{"generated_text": ...}``) per input, or a list of
them per input with ``num_return_sequences > 1``.

This file imports only `typing` and transformers: it is copied next to a saved model and loaded as remote code.
"""

from typing import Any

from transformers import Pipeline


class Text2TextGenerationPipeline(Pipeline):
    """Generate a text from a text with an encoder-decoder model; each result is ``{"generated_text": str}``."""

    return_name = "generated"
    """Prefix of the output key: ``f"{return_name}_text"``."""

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def __call__(self, inputs: str | list[str], **kwargs: Any) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """Generate from one text or a list of texts.

        Args:
            inputs: A source text, or a list of them (pass ``batch_size=`` to generate for several at once).
            truncation: Cut sources longer than the tokenizer's ``model_max_length`` (default: no truncation).
            return_tensors: Return the generated token ids (``"<return_name>_token_ids"``) instead of the text.
            **kwargs: Generation parameters (``num_beams``, ``max_new_tokens``, ``num_return_sequences``, ...),
                overriding the model's generation config.

        Returns:
            For a text, a list of results, one per returned sequence. For a list of texts, one result per text when
            one sequence is returned for each (the default), else one list of results per text.
        """
        results = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results

    def _sanitize_parameters(
        self, truncation: bool | None = None, return_tensors: bool | None = None, **generate_kwargs: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        preprocess_params = {} if truncation is None else {"truncation": truncation}
        postprocess_params = {} if return_tensors is None else {"return_tensors": return_tensors}
        return preprocess_params, generate_kwargs, postprocess_params

    def preprocess(self, text: str, truncation: bool = False) -> dict[str, Any]:
        if not isinstance(text, str):
            raise ValueError(
                f"inputs must be a string or a list of strings, got an item of type {type(text).__name__}"
            )
        return self.tokenizer(text, truncation=truncation, return_tensors="pt")

    def _forward(self, model_inputs: dict[str, Any], **generate_kwargs) -> dict[str, Any]:
        model_inputs = _pad_right(model_inputs)
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **self._prepare_generate_kwargs(generate_kwargs))
        # [batch * sequences, length] -> [batch, sequences, length], so that the pipeline can split the batch.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs: dict[str, Any], return_tensors: bool = False) -> list[dict[str, Any]]:
        sequences = model_outputs["output_ids"][0]  # [sequences, length], for one input
        if return_tensors:
            return [{f"{self.return_name}_token_ids": ids} for ids in sequences]
        return [
            {f"{self.return_name}_text": self.tokenizer.decode(ids, skip_special_tokens=True)} for ids in sequences
        ]


def _pad_right(model_inputs: dict[str, Any]) -> dict[str, Any]:
    """The batch with every row's tokens moved before its padding, and its attention mask.

    Positions are absolute (as in Marian and BART): a left-padded source starts at a later position and translates
    differently, so batches are right-padded whatever the tokenizer's ``padding_side``.
    """
    mask = model_inputs.get("attention_mask")
    if mask is None or mask.dim() != 2:
        return model_inputs
    order = (1 - mask.long()).argsort(dim=1, stable=True)  # real tokens first, each side in its order
    return {
        **model_inputs,
        "input_ids": model_inputs["input_ids"].gather(1, order),
        "attention_mask": mask.gather(1, order),
    }


class TranslationPipeline(Text2TextGenerationPipeline):
    """Translate texts with an encoder-decoder model; each result is ``{"translation_text": str}``."""

    return_name = "translation"


__all__ = ["Text2TextGenerationPipeline", "TranslationPipeline"]
