"""Build the tiny random-weight Llama that the real-vLLM tests serve (run by the vLLM venv's python).

No weights can be downloaded here, and the tests need none: a 2-layer Llama with random weights
(head size 32, which vLLM's CPU attention supports) and a byte-level BPE tokenizer trained on a
few lines of text, with a chat template, make a model vLLM loads and serves like any other. Its
output is random tokens; byte-level pieces that do not end a UTF-8 character make vLLM send some
tokens without text, exactly as real models do with multi-byte characters.

    .venv-vllm/bin/python tests/engines/tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Bump when the model or tokenizer changes: the harness rebuilds a folder whose stamp differs.
VERSION = "tiny-llama-2"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Inference engines batch requests, prefill prompts and decode tokens one step at a time.",
    "A prefix cache keeps the key and value tensors of shared prompt tokens for reuse.",
    "Grüße aus Köln, naïve café, déjà vu, 東京, 北京, Ελληνικά, русский, עברית, 🙂🚀",
    "def main():\n    return sum(range(10)) * 3.14  # numbers 0123456789",
]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 50, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    vocab = tokenizer.get_vocab_size()
    config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                         bos_token_id=tokenizer.token_to_id("<s>"), eos_token_id=tokenizer.token_to_id("</s>"),
                         tie_word_embeddings=True, torch_dtype="float32")
    torch.manual_seed(14)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": config.bos_token_id,
                                                            "eos_token_id": config.eos_token_id}))
    (out / "STAMP").write_text(VERSION)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))
