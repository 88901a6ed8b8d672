#!/usr/bin/env python3
"""Writes tiny_corpus.txt: about 40 KB of plain English sentences for the data-layer tests.

The text is generated here from our own small grammar and word lists (nothing is copied
from elsewhere), with a fixed seed, so the committed file can be made again byte for byte:
    python3 tests/data/make_tiny_corpus.py > tests/data/tiny_corpus.txt
It mixes what a byte-level BPE must handle: contractions, digits, punctuation, quotes,
newlines, runs of spaces, and a few non-ASCII (UTF-8) words.
"""
import random

rng = random.Random(20261130)

people = ["the baker", "my neighbour", "a young engineer", "the old captain", "her brother",
          "the teacher", "a tired student", "the mayor", "our cat", "the gardener", "a stranger",
          "the night nurse", "his grandmother", "the new clerk", "a quiet musician", "the pilot",
          "Anna", "Ben", "Clara", "David", "Elena", "Farid", "Grace", "Hugo", "Iris", "José",
          "Zoë", "the café owner", "a naïve tourist"]
verbs_past = ["found", "carried", "painted", "repaired", "forgot", "opened", "counted", "sold",
              "borrowed", "cleaned", "wrote", "measured", "lost", "noticed", "watched", "built",
              "cooked", "hid", "described", "tested"]
things = ["a wooden box", "the broken clock", "three letters", "a map of the river", "the red bicycle",
          "an umbrella", "the kitchen window", "a basket of apples", "the garden gate", "a small boat",
          "the library books", "a cup of tea", "the old piano", "a pair of boots", "the train tickets",
          "a loaf of bread", "the village bell", "a paper kite", "the last candle", "a jar of honey"]
places = ["near the harbour", "behind the school", "in the market", "on the hill", "under the bridge",
          "at the station", "in the attic", "by the lake", "outside the bakery", "across the square",
          "in the forest", "at the museum", "on the roof", "in the old mill"]
times = ["yesterday", "this morning", "last winter", "before dawn", "after lunch", "on Sunday",
         "in 1987", "at 7:45", "every Tuesday", "twice a week", "during the storm", "at midnight"]
adjectives = ["quiet", "bright", "heavy", "strange", "careful", "cheerful", "narrow", "golden",
              "patient", "noisy", "gentle", "clever", "empty", "ancient", "warm"]
reasons = ["because it was raining", "since nobody else would", "although it was late",
           "so that the children could play", "because the shop was closed", "while the soup cooled",
           "before the guests arrived", "after the lights went out"]
thoughts = ["I don't think it matters", "we'll see what happens", "it's better than nothing",
            "they're never on time", "you've got to try", "she'd rather walk", "he's probably right",
            "that's what I said", "we can't stay long", "it isn't far", "I'm not so sure",
            "you'll like it", "they've seen worse"]


def number_phrase():
    n = rng.choice([2, 3, 4, 5, 7, 12, 15, 20, 42, 100, 250, 1000, 2026])
    unit = rng.choice(["minutes", "steps", "coins", "pages", "kilometres", "eggs", "days", "books"])
    return f"{n} {unit}"


def sentence():
    kind = rng.randrange(8)
    p = rng.choice(people)
    if kind == 0:
        s = f"{p} {rng.choice(verbs_past)} {rng.choice(things)} {rng.choice(places)} {rng.choice(times)}."
    elif kind == 1:
        s = f"{rng.choice(times)}, {p} {rng.choice(verbs_past)} {rng.choice(things)} {rng.choice(reasons)}."
    elif kind == 2:
        s = f'"{rng.choice(thoughts).capitalize()}," said {p}.'
    elif kind == 3:
        s = f"The {rng.choice(adjectives)} room {rng.choice(places)} held {number_phrase()} and {rng.choice(things)}."
    elif kind == 4:
        s = f"Why did {p} leave {rng.choice(things)} {rng.choice(places)}? Nobody knew; {rng.choice(thoughts)}."
    elif kind == 5:
        s = f"It took {number_phrase()} (about {rng.randint(10, 99)}%) to reach the {rng.choice(adjectives)} house {rng.choice(places)}."
    elif kind == 6:
        s = f"{p} was {rng.choice(adjectives)} and {rng.choice(adjectives)} -- {rng.choice(thoughts)}!"
    else:
        s = f"{p}'s {rng.choice(adjectives)} friend {rng.choice(verbs_past)} {rng.choice(things)}, then {rng.choice(verbs_past)} {rng.choice(things)}."
    return s[0].upper() + s[1:]


paragraphs = []
size = 0
while size < 40000:
    lines = []
    for _ in range(rng.randint(2, 6)):
        sep = rng.choice([" ", " ", " ", "  "])
        lines.append(sep.join(sentence() for _ in range(rng.randint(1, 3))))
    para = "\n".join(lines)
    paragraphs.append(para)
    size += len(para.encode()) + 2
print("\n\n".join(paragraphs))
