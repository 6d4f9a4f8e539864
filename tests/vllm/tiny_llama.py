"""Build a tiny random-weight Llama for the real-vLLM test tier, offline.

Run with the vLLM venv's interpreter (it has ``transformers``, ``tokenizers`` and ``torch``;
Sardeenz's own venv does not): ``python tiny_llama.py OUT_DIR``. Nothing is downloaded: the
config is written by hand, the weights are random, and the tokenizer is a byte-level BPE
trained here on the inline text below. The test fixture caches the result keyed by a hash
of this file, so editing it rebuilds the model.

The shape (hidden 128, 2 layers, 4 heads of 32) keeps the weights at about 8 MB so vLLM's
CPU build loads it in well under a second; what the tests measure is Sardeenz, not the model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 1234
VOCAB_SIZE = 1024
MAX_POSITIONS = 2048

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

CORPUS = """
Sardeenz runs many language models side by side on shared accelerators and serves them behind
one OpenAI-compatible endpoint. The controller supervises engine processes, watches their
health, parses their logs and routes every request to the model it names. A sardine is a small
fish that swims in large schools; the tin keeps them close together, which is the whole idea.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Hello, world! How are you today? I am fine, thank you. What is the capital of France? Paris.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1000. Punctuation: , . ; : ! ? ' " ( ) [ ] { } - _ / \\
""".strip()


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    specials = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        additional_special_tokens=specials[3:],
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    # vLLM reads the chat template from tokenizer_config.json; keep a copy beside it too.
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    build_model(out, tokenizer)
    files = sorted(p.name for p in out.iterdir())
    if not any(name.endswith(".safetensors") for name in files):
        raise SystemExit(f"no safetensors weights written in {out}: {files}")
    print(json.dumps({"dir": str(out), "files": files, "vocab": len(tokenizer)}))


if __name__ == "__main__":
    main()
