#!/usr/bin/env python3
"""A multi-turn chat with a tiny numpy attention model over prefixkv.

The model: token + sinusoidal position embeddings, 3 attention layers (2 heads
of 16), the middle one a sliding window of 8 tokens, greedy decoding with the
embedding as the output head. Weights are random (seeded): the replies are
noise, but every number is real attention arithmetic.

Each turn the prompt is the conversation so far plus a new user message. The
engine restores the longest cached prefix (full-attention layers: the blocks'
keys/values; the window layer: the state stored at the end of the last turn),
the model computes only the rest, decodes a reply, and stores the turn's
caches for the next one. The same turn is also decoded from scratch, without
the cache; the replies and logits must agree, or the example exits 1.

Run: tools/run python examples/python/multi_turn.py [--turns N] [--data-dir DIR]
"""
import argparse
import sys
import tempfile

import numpy as np

import prefixkv

VOCAB, D_MODEL, HEADS, WINDOW, BLOCK_TOKENS = 97, 32, 2, 8, 4
LAYER_TYPES = ["KVCache", "RotatingKVCache", "KVCache"]
HEAD_DIM = D_MODEL // HEADS


class TinyModel:
    def __init__(self, seed=7):
        rng = np.random.default_rng(seed)
        scale = 1.0 / np.sqrt(D_MODEL)
        self.embed = rng.standard_normal((VOCAB, D_MODEL)).astype(np.float32)
        self.weights = [
            {name: (rng.standard_normal((D_MODEL, D_MODEL)) * scale).astype(np.float32)
             for name in ("q", "k", "v", "o")} for _ in LAYER_TYPES]

    @staticmethod
    def positions(start, count):
        pos = np.arange(start, start + count, dtype=np.float32)[:, None]
        freq = np.exp(-np.log(10000.0) * np.arange(0, D_MODEL, 2) / D_MODEL)
        out = np.zeros((count, D_MODEL), np.float32)
        out[:, 0::2], out[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
        return out

    @staticmethod
    def heads(x):  # [T, D] -> [1, H, T, hd]
        return x.reshape(len(x), HEADS, HEAD_DIM).transpose(1, 0, 2)[None]

    def forward(self, tokens, start, caches):
        """Runs `tokens` at positions start.. over `caches` (one (keys, values)
        pair per layer: every past position for full layers, the last WINDOW
        positions for the window layer). Returns (last logits, new caches)."""
        x = self.embed[tokens] + self.positions(start, len(tokens))
        new_caches = []
        for w, kind, (past_k, past_v) in zip(self.weights, LAYER_TYPES, caches):
            q, k, v = (self.heads(x @ w[n]) for n in ("q", "k", "v"))
            keys = np.concatenate([past_k, k], axis=2)
            values = np.concatenate([past_v, v], axis=2)
            key_pos = np.arange(start + len(tokens) - keys.shape[2], start + len(tokens))
            query_pos = np.arange(start, start + len(tokens))
            allowed = key_pos[None, :] <= query_pos[:, None]
            if kind == "RotatingKVCache":
                allowed &= key_pos[None, :] > query_pos[:, None] - WINDOW
            scores = q @ keys.transpose(0, 1, 3, 2) / np.sqrt(HEAD_DIM)
            scores = np.where(allowed, scores, -np.inf)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            attn = probs @ values  # [1, H, T, hd]
            x = x + attn[0].transpose(1, 0, 2).reshape(len(tokens), D_MODEL) @ w["o"]
            if kind == "RotatingKVCache":  # keep the last WINDOW positions
                keys, values = keys[:, :, -WINDOW:], values[:, :, -WINDOW:]
            new_caches.append((keys, values))
        return x[-1] @ self.embed.T, new_caches

    @staticmethod
    def empty_caches():
        z = np.zeros((1, HEADS, 0, HEAD_DIM), np.float32)
        return [(z, z) for _ in LAYER_TYPES]

    def generate(self, prompt, start, caches, reply_tokens):
        """Prefills prompt[start:] over `caches` (which cover prompt[:start]),
        then decodes greedily. Returns (reply, logits per step, caches covering
        prompt + reply[:-1])."""
        logits, caches = self.forward(prompt[start:], start, caches)
        reply, all_logits, pos = [], [], len(prompt)
        for step in range(reply_tokens):
            all_logits.append(logits)
            reply.append(int(np.argmax(logits)))
            if step + 1 < reply_tokens:
                logits, caches = self.forward([reply[-1]], pos, caches)
                pos += 1
        return reply, np.array(all_logits), caches


def to_layers(caches, tokens):
    """The model's caches as prefixkv layers covering `tokens` tokens."""
    layers = []
    for kind, (k, v) in zip(LAYER_TYPES, caches):
        if kind == "RotatingKVCache":
            filled = k.shape[2]  # min(tokens, WINDOW), oldest first
            meta = [0, WINDOW, tokens, filled]
            layers.append(prefixkv.Layer(kind, [np.ascontiguousarray(k),
                                                np.ascontiguousarray(v)],
                                         meta=[str(m) for m in meta]))
        else:
            layers.append([np.ascontiguousarray(k), np.ascontiguousarray(v)])
    return layers


def from_restored(restored):
    """Restored layers back into the model's caches (the arrays are read-only
    views; the model only reads them and concatenates into new arrays)."""
    if restored.restored_tokens == 0:
        return TinyModel.empty_caches()
    return [(layer.tensors[0], layer.tensors[1]) for layer in restored.layers]


def chat(engine, model, turns, reply_tokens, rng):
    ns = engine.register_model("tiny-chat", LAYER_TYPES, block_tokens=BLOCK_TOKENS,
                               dtype="float32", store_partial_tail=True)
    history, totals, ok = [], [0, 0], True
    print(f"{'turn':>4} {'prompt':>6} {'restored':>8} {'computed':>8}  reply == recomputed")
    for turn in range(turns):
        prompt = history + [int(t) for t in rng.integers(0, VOCAB, 5 + turn)]
        restored = engine.restore(engine.match(ns, prompt))
        start = restored.restored_tokens
        reply, logits, caches = model.generate(prompt, start, from_restored(restored),
                                               reply_tokens)
        ref_reply, ref_logits, _ = model.generate(prompt, 0, TinyModel.empty_caches(),
                                                  reply_tokens)
        same = reply == ref_reply and np.allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
        ok &= same
        computed = len(prompt) - start + reply_tokens - 1
        totals[0] += start
        totals[1] += computed
        print(f"{turn + 1:>4} {len(prompt):>6} {start:>8} {computed:>8}  "
              f"{'yes' if same else 'NO'}" + (f"  ({restored.reason})" if restored.reason else ""))
        stored_tokens = prompt + reply[:-1]  # the last reply token is not run yet
        engine.store(ns, stored_tokens, to_layers(caches, len(stored_tokens)))
        del restored, caches  # releases the pinned blocks the arrays viewed
        history = prompt + reply
    print(f"tokens restored {totals[0]}, computed {totals[1]}")
    return ok and totals[0] > 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=6, help="chat turns (default 6)")
    parser.add_argument("--reply-tokens", type=int, default=6,
                        help="tokens decoded per reply (default 6)")
    parser.add_argument("--data-dir", help="SSD tier directory (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=1, help="user messages' seed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with prefixkv.Engine.open(data_dir=args.data_dir or tmp, hot_bytes=64 << 20,
                                  quiet=True) as engine:
            ok = chat(engine, TinyModel(), args.turns, args.reply_tokens,
                      np.random.default_rng(args.seed))
            assert engine.audit()["ok"]
    if not ok:
        print("FAILED: a restored turn decoded differently from the recomputed one")
        return 1
    print("OK: every restored turn decoded exactly as the recomputed one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
