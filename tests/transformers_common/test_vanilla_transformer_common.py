"""transformers' own common model tests, run against our classes as against a model contributed to transformers.

The test files come from transformers' sdist of the installed version: `.ci/transformers_tests PYTHON` downloads and
extracts them and points TRANSFORMERS_TESTS_DIR at the folder holding their `tests` package. Without that variable
(the plain ``python -m pytest`` run) this module is skipped.

Modelled on transformers' tests/models/marian/test_modeling_marian.py (MarianModelTester, MarianModelTest). Common
tests that do not apply to the paper's model are skipped below, each with its reason.
"""

import copy
import os
import sys
import tempfile
import unittest

import pytest

TESTS_DIR = os.environ.get("TRANSFORMERS_TESTS_DIR")
if not TESTS_DIR:
    pytest.skip(
        "TRANSFORMERS_TESTS_DIR is not set: run transformers' common tests with .ci/transformers_tests PYTHON",
        allow_module_level=True,
    )
sys.path.insert(0, TESTS_DIR)  # transformers' `tests` package (a regular package, so it wins over our tests/ dir)

import torch  # noqa: E402
from tests.generation.test_utils import GenerationTesterMixin  # noqa: E402
from tests.test_configuration_common import ConfigTester  # noqa: E402
from tests.test_modeling_common import ModelTesterMixin, ids_tensor  # noqa: E402
from transformers.modeling_outputs import Seq2SeqModelOutput  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402
from transformers.testing_utils import require_torch, require_torch_fp16, torch_device  # noqa: E402

from vanilla_transformer import (  # noqa: E402
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from vanilla_transformer.modeling_vanilla_transformer import (  # noqa: E402
    VanillaTransformerDecoder,
    VanillaTransformerEncoder,
)

# The generation cache's name in forward and in the outputs: `cache` from transformers 5.24 on, `past_key_values` before.
CACHE_NAME = "cache" if "cache" in Seq2SeqModelOutput.__dataclass_fields__ else "past_key_values"
GENERATION_STAND_IN = getattr(GenerationTesterMixin, "_vanilla_transformer_stand_in", False)

# A model contributed to transformers is listed in the name tables of `models/auto/modeling_auto.py`; the common
# tests read them to tell a bare model (no loss, not trained in `test_training`) from one with a sequence-to-sequence
# head (given `labels` by `_prepare_for_class`). `AutoModel.register` does not add to them, so this module does, as
# `marian` is listed, for the duration of the module.
AUTO_NAMES = {
    "MODEL_MAPPING_NAMES": "VanillaTransformerModel",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "VanillaTransformerForConditionalGeneration",
}


def setUpModule():
    for table, class_name in AUTO_NAMES.items():
        getattr(modeling_auto, table)[VanillaTransformerConfig.model_type] = class_name


def tearDownModule():
    for table in AUTO_NAMES:
        getattr(modeling_auto, table).pop(VanillaTransformerConfig.model_type, None)


def prepare_vanilla_transformer_inputs_dict(
    config, input_ids, decoder_input_ids, attention_mask=None, decoder_attention_mask=None
):
    if attention_mask is None:
        attention_mask = input_ids.ne(config.pad_token_id)
    if decoder_attention_mask is None:
        decoder_attention_mask = decoder_input_ids.ne(config.pad_token_id)
    return {
        "input_ids": input_ids,
        "decoder_input_ids": decoder_input_ids,
        "attention_mask": attention_mask,
        "decoder_attention_mask": decoder_attention_mask,
    }


class VanillaTransformerModelTester:
    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        use_labels=False,
        vocab_size=99,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=4,
        hidden_act="relu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=100,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = self.eos_token_id  # Eos Token
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)

        config = self.get_config()
        inputs_dict = prepare_vanilla_transformer_inputs_dict(config, input_ids, decoder_input_ids)
        return config, inputs_dict

    def get_config(self):
        return VanillaTransformerConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            activation_function=self.hidden_act,
            dropout=self.hidden_dropout_prob,
            attention_dropout=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()

    def create_and_check_decoder_model_past_large_inputs(self, config, inputs_dict):
        model = VanillaTransformerModel(config=config).get_decoder().to(torch_device).eval()
        input_ids = inputs_dict["input_ids"]
        attention_mask = inputs_dict["attention_mask"]

        # first forward pass
        outputs = model(input_ids, attention_mask=attention_mask, use_cache=True)
        cache = outputs[CACHE_NAME]

        # create hypothetical multiple next token and extent to next_input_ids
        next_tokens = ids_tensor((self.batch_size, 3), config.vocab_size)
        next_attn_mask = ids_tensor((self.batch_size, 3), 2)

        # append to next input_ids and
        next_input_ids = torch.cat([input_ids, next_tokens], dim=-1)
        next_attention_mask = torch.cat([attention_mask, next_attn_mask], dim=-1)

        output_from_no_past = model(next_input_ids, attention_mask=next_attention_mask)["last_hidden_state"]
        output_from_past = model(next_tokens, attention_mask=next_attention_mask, **{CACHE_NAME: cache})[
            "last_hidden_state"
        ]

        # select random slice
        random_slice_idx = ids_tensor((1,), output_from_past.shape[-1]).item()
        output_from_no_past_slice = output_from_no_past[:, -3:, random_slice_idx].detach()
        output_from_past_slice = output_from_past[:, :, random_slice_idx].detach()

        self.parent.assertTrue(output_from_past_slice.shape[1] == next_tokens.shape[1])

        # test that outputs are equal for slice
        self.parent.assertTrue(torch.allclose(output_from_past_slice, output_from_no_past_slice, atol=1e-3))

    def check_encoder_decoder_model_standalone(self, config, inputs_dict):
        model = VanillaTransformerModel(config=config).to(torch_device).eval()
        outputs = model(**inputs_dict)

        encoder_last_hidden_state = outputs.encoder_last_hidden_state
        last_hidden_state = outputs.last_hidden_state

        with tempfile.TemporaryDirectory() as tmpdirname:
            encoder = model.get_encoder()
            encoder.save_pretrained(tmpdirname)
            encoder = VanillaTransformerEncoder.from_pretrained(tmpdirname).to(torch_device)

        encoder_last_hidden_state_2 = encoder(inputs_dict["input_ids"], attention_mask=inputs_dict["attention_mask"])[
            0
        ]

        self.parent.assertTrue((encoder_last_hidden_state_2 - encoder_last_hidden_state).abs().max().item() < 1e-3)

        with tempfile.TemporaryDirectory() as tmpdirname:
            decoder = model.get_decoder()
            decoder.save_pretrained(tmpdirname)
            decoder = VanillaTransformerDecoder.from_pretrained(tmpdirname).to(torch_device)

        last_hidden_state_2 = decoder(
            input_ids=inputs_dict["decoder_input_ids"],
            attention_mask=inputs_dict["decoder_attention_mask"],
            encoder_hidden_states=encoder_last_hidden_state,
            encoder_attention_mask=inputs_dict["attention_mask"],
        )[0]

        self.parent.assertTrue((last_hidden_state_2 - last_hidden_state).abs().max().item() < 1e-3)


@require_torch
class VanillaTransformerModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    # Not PipelineTesterMixin: its tests live in transformers' tests/pipelines/ (not in the sdist) and read the
    # tiny-model summary of the Hub. Our pipelines are tested in tests/test_pipeline.py.
    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    is_encoder_decoder = True
    # test_can_init_all_missing_weights skips models whose modeling file has no "# Copyright <year>" line dated 2023
    # or later (older transformers models not yet fixed); ours has none, and should pass it.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=VanillaTransformerConfig, d_model=16)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_generation_common_tests_available(self):
        if GENERATION_STAND_IN:
            self.skipTest(
                "transformers' sdist has no tests/generation/test_utils.py: GenerationTesterMixin is a stand-in and "
                "no generation common test ran (set TRANSFORMERS_SOURCE for .ci/transformers_tests to run them)"
            )

    def test_save_load_strict(self):
        config, inputs_dict = self.model_tester.prepare_config_and_inputs()
        for model_class in self.all_model_classes:
            model = model_class(config)

            with tempfile.TemporaryDirectory() as tmpdirname:
                model.save_pretrained(tmpdirname)
                model2, info = model_class.from_pretrained(tmpdirname, output_loading_info=True)
            self.assertEqual(list(info["missing_keys"]), [])

    def test_decoder_model_past_with_large_inputs(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs()
        self.model_tester.create_and_check_decoder_model_past_large_inputs(*config_and_inputs)

    def test_encoder_decoder_model_standalone(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs_for_common()
        self.model_tester.check_encoder_decoder_model_standalone(*config_and_inputs)

    @require_torch_fp16
    def test_generate_fp16(self):
        config, input_dict = self.model_tester.prepare_config_and_inputs()
        input_ids = input_dict["input_ids"]
        attention_mask = input_ids.ne(1).to(torch_device)
        model = VanillaTransformerForConditionalGeneration(config).eval().to(torch_device)
        model.half()
        model.generate(input_ids, attention_mask=attention_mask)
        model.generate(num_beams=4, do_sample=True, early_stopping=False, num_return_sequences=3)

    def test_share_encoder_decoder_embeddings(self):
        """Marian's test of `share_encoder_decoder_embeddings`, for our `tie_word_embeddings` (section 3.4: one matrix
        for the encoder input, the decoder input and the output projection). Marian shares the embedding module;
        ours ties the weight (`_tied_weights_keys`), so the weights are compared, not the modules."""
        config, _ = self.model_tester.prepare_config_and_inputs()

        # shared by default
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIs(model.get_encoder().embed_tokens.weight, model.get_decoder().embed_tokens.weight)
            if model.get_output_embeddings() is not None:
                self.assertIs(model.get_output_embeddings().weight, model.get_input_embeddings().weight)

        # not shared with tie_word_embeddings=False
        untied = copy.deepcopy(config)
        untied.tie_word_embeddings = False
        for model_class in self.all_model_classes:
            model = model_class(untied)
            self.assertIsNot(model.get_encoder().embed_tokens.weight, model.get_decoder().embed_tokens.weight)
            if model.get_output_embeddings() is not None:
                self.assertIsNot(model.get_output_embeddings().weight, model.get_input_embeddings().weight)

        # shared again after a save and a load
        for model_class in self.all_model_classes:
            with tempfile.TemporaryDirectory() as tmpdirname:
                model_class(config).save_pretrained(tmpdirname)
                model = model_class.from_pretrained(tmpdirname)
            self.assertIs(model.get_encoder().embed_tokens.weight, model.get_decoder().embed_tokens.weight)
