#!/usr/bin/env python3
"""Text generation in Python over ExecuTorch's runtime with this project's
backend: the token loop of ``et_cuda_run --prompt`` (runner/README.md, "Text
generation"), printing the same tokens.

    python3 examples/generate.py --model_path llm/model.pte --data_path llm/aoti_cuda_blob.ptd \\
        --tokenizer_path tokenizer/testdata/bpe.json --prompt "The runner loads a program" --seq_len 64

Needs the package (``pip install .``, or ``python/`` on PYTHONPATH), the native
libraries (README.md, "Python"), numpy, HuggingFace ``tokenizers``, torch, and
ExecuTorch 1.5.1: through ``executorch.runtime`` when torch is 2.13 (the torch its
Python bindings were compiled against), else through ``executorch_cuda.bridge``
(ExecuTorch's C++ runtime with ctypes; ``--runtime`` chooses).
The text goes to stdout as it comes; the ``text:`` and ``generate:`` lines to
stderr (``tokens=`` is the list to compare with et_cuda_run's).

The token is chosen on the device (``et_cuda_sample``) when the program leaves
its logits there; ExecuTorch 1.5 exports copy method outputs to the host
inside the program (an ``et_copy::_d2h_copy`` after the delegate), so with
``examples/export_llm.py``'s program the host sampler runs, as in et_cuda_run.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # the package from this checkout when not installed

EOS_TOKENS = ("<|endoftext|>", "</s>", "<|im_end|>", "<eos>", "<end_of_turn>", "<|end_of_text|>",
              "<|eot_id|>", "<|eom_id|>", "<|end|>")
DEFAULT_NEW_TOKENS = 128


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_path", "--model", required=True)
    p.add_argument("--data_path", "--data", default=None)
    p.add_argument("--tokenizer_path", "--tokenizer", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=0)
    p.add_argument("--seq_len", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefill-method", default="forward")
    p.add_argument("--decode-method", default="forward")
    p.add_argument("--runtime", choices=("auto", "executorch", "bridge"), default="auto",
                   help="executorch: executorch.runtime (needs the torch its bindings were compiled against); "
                        "bridge: ExecuTorch's C++ Module through executorch_cuda.bridge (any torch); "
                        "auto: executorch when torch matches, else bridge")
    return p.parse_args(argv)


class TextStream:
    """Each new token's text: what decoding the sequence so far adds (held back
    while the text ends in an incomplete UTF-8 sequence)."""

    def __init__(self, tok):
        self.tok, self.ids, self.shown = tok, [], ""

    def push(self, token):
        self.ids.append(int(token))
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        piece = text[len(self.shown):] if text.startswith(self.shown) else text
        self.shown = text
        return piece

    def finish(self):
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        piece = text[len(self.shown):] if text.startswith(self.shown) else ""
        self.shown = text
        return piece


def eos_ids(tok):
    return {i for i, t in tok.get_added_tokens_decoder().items() if t.special and t.content in EOS_TOKENS}


def max_seq_len(prog):
    try:
        out = prog.method("get_max_seq_len").execute([])
    except (KeyError, RuntimeError):  # no such method
        return 0
    return int(out[0]) if out and isinstance(out[0], int) else 0


def main(argv=None):
    a = parse(argv)
    import torch
    from tokenizers import Tokenizer

    import executorch_cuda
    from executorch_cuda.sampling import Sampler

    tok = Tokenizer.from_file(a.tokenizer_path)
    prompt = tok.encode(a.prompt, add_special_tokens=True).ids
    if not prompt:
        sys.exit("generate.py: the prompt encodes to no tokens")
    sampler = Sampler(a.temperature, a.top_p, a.seed)
    runtime = a.runtime
    if runtime == "auto":
        try:
            executorch_cuda.runtime.check_torch()
            runtime = "executorch"
        except (executorch_cuda.TorchVersionError, executorch_cuda.NativeLibraryError):
            runtime = "bridge"
    t_load = time.perf_counter()
    if runtime == "bridge":
        from executorch_cuda import bridge

        prog = bridge.load(a.model_path, a.data_path)
    else:
        prog = executorch_cuda.load(a.model_path, a.data_path)
    prefill, decode = prog.method(a.prefill_method), prog.method(a.decode_method)
    cache = max_seq_len(prog)
    n = len(prompt)
    if a.seq_len > 0 and n >= a.seq_len:
        sys.exit(f"generate.py: the prompt has {n} tokens, --seq_len is {a.seq_len}: no room for a new token")
    if cache > 0 and n >= cache:
        sys.exit(f"generate.py: the prompt has {n} tokens, the program's cache holds {cache}")
    steps = a.max_new_tokens
    if steps <= 0:
        steps = DEFAULT_NEW_TOKENS
        if cache > 0:
            steps = min(steps, cache - n)
    if a.seq_len > 0:
        steps = min(steps, a.seq_len - n)
    load_ms = (time.perf_counter() - t_load) * 1e3

    def run(method, ids, start):
        inputs = [torch.tensor([ids], dtype=torch.int64)]
        if method.num_inputs == 2:
            inputs.append(torch.arange(start, start + len(ids), dtype=torch.int64))
        return sampler.pick(method.execute(inputs)[0])

    eos, stream, tokens, why = eos_ids(tok), TextStream(tok), [], "max-new-tokens"

    def finished(token):
        nonlocal why
        if token < 0:
            sys.exit("generate.py: the logits are all NaN or -inf: nothing to sample")
        if token in eos:
            why = "eos"
            return True
        sys.stdout.write(stream.push(token))
        sys.stdout.flush()
        return False

    t0 = time.perf_counter()
    tokens.append(run(prefill, prompt, 0))
    t_first = time.perf_counter()
    done = finished(tokens[-1])
    position = n
    while len(tokens) < steps and not done:
        tokens.append(run(decode, [tokens[-1]], position))
        position += 1
        done = finished(tokens[-1])
    t_end = time.perf_counter()
    sys.stdout.write(stream.finish() + "\n")
    sys.stdout.flush()
    sampling = "greedy" if sampler.greedy else f"temperature={a.temperature:.3f} top_p={a.top_p:.3f} seed={a.seed}"
    decoded = len(tokens) - 1
    rate = f"{decoded / (t_end - t_first):.1f}" if decoded > 0 and t_end > t_first else "n/a"
    print(f"text: stop={why} prompt_tokens={n} new_tokens={len(tokens)} sampling={sampling} "
          f"prompt_ids={','.join(map(str, prompt))}", file=sys.stderr)
    print(f"generate: prefill={a.prefill_method} decode={a.decode_method} prompt_tokens={n} "
          f"new_tokens={len(tokens)} runtime={runtime} load_ms={load_ms:.1f} ttft_ms={(t_first - t0) * 1e3:.3f} decode_tok_s={rate} "
          f"sampler={'device' if sampler.on_device else 'host'} tokens={','.join(map(str, tokens))}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
