"""Generate ``personas.jsonl``: synthetic residents of Larkhaven for agent societies.

Every persona is drawn from the hand-written pools below with ``random.Random(SEED)``, so
the file is reproducible byte for byte::

    python datasets/make_personas.py            # rewrites datasets/personas.jsonl
    python datasets/make_personas.py --check    # exits 1 if the committed file differs

No real people: names are recombined from common first and last names; bios are templated.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20261129
COUNT = 240
SCHEMA_VERSION = 1
OUT = Path(__file__).with_name("personas.jsonl")

FIRST = [
    "Ada", "Bilal", "Chiara", "Dmitri", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas",
    "Kavya", "Luca", "Maya", "Nikos", "Oona", "Pablo", "Quinn", "Rosa", "Sami", "Tove",
    "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zara", "Arjun", "Beatriz", "Colm", "Dalia",
    "Emeka", "Freya", "Gabriel", "Hana", "Ivo", "Jia", "Kofi", "Lena", "Mateo", "Nadia",
]  # fmt: skip
LAST = [
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Haddad", "Silva", "Kowalski",
    "O'Brien", "Nguyen", "Fischer", "Rossi", "Adeyemi", "Kaur", "Petrov", "Castillo",
    "Yilmaz", "Murphy", "Sato", "Andersen", "Mensah", "Dubois", "Costa", "Bauer", "Ibrahim",
    "Larsen", "Chen", "Ortiz", "Varga", "Quispe",
]  # fmt: skip
# (occupation, typical interests) — interests are sampled partly from here, partly at large
OCCUPATIONS = [
    ("nurse", ["health", "running", "cooking"]),
    ("secondary school teacher", ["education", "history", "board games"]),
    ("software developer", ["open source", "cycling", "science fiction"]),
    ("harbour crane operator", ["fishing", "football", "local politics"]),
    ("bakery owner", ["cooking", "small business", "gardening"]),
    ("tram driver", ["public transport", "photography", "jazz"]),
    ("city council clerk", ["local politics", "urban planning", "crosswords"]),
    ("marine biologist", ["climate", "sailing", "birdwatching"]),
    ("retired engineer", ["woodworking", "history", "chess"]),
    ("university student", ["music festivals", "gaming", "climate"]),
    ("journalist", ["local politics", "books", "podcasts"]),
    ("electrician", ["home renovation", "football", "fishing"]),
    ("pharmacist", ["health", "hiking", "languages"]),
    ("graphic designer", ["art", "typography", "coffee"]),
    ("bus mechanic", ["motorsport", "public transport", "barbecue"]),
    ("librarian", ["books", "local history", "knitting"]),
    ("startup founder", ["technology", "investing", "running"]),
    ("care worker", ["family", "cooking", "gospel music"]),
    ("architect", ["urban planning", "design", "cycling"]),
    ("fisher", ["sailing", "weather", "fishing"]),
    ("restaurant cook", ["cooking", "food markets", "football"]),
    ("police officer", ["community safety", "martial arts", "dogs"]),
    ("musician", ["jazz", "music festivals", "vinyl records"]),
    ("accountant", ["investing", "tennis", "travel"]),
    ("delivery rider", ["cycling", "gaming", "street food"]),
    ("physiotherapist", ["sport", "yoga", "health"]),
    ("shop assistant", ["fashion", "reality tv", "pets"]),
    ("climate researcher", ["climate", "data", "hiking"]),
    ("real-estate agent", ["housing market", "golf", "interior design"]),
    ("stay-at-home parent", ["family", "education", "gardening"]),
]  # fmt: skip
EXTRA_INTERESTS = [
    "astronomy", "theatre", "volunteering", "swimming", "podcasts", "baking", "poetry",
    "film", "bird photography", "comics", "meditation", "basketball", "genealogy", "wine",
    "rock climbing", "robotics", "permaculture", "urban sketching", "true crime", "opera",
]  # fmt: skip
TRAITS = [
    "curious", "skeptical", "warm", "blunt", "patient", "impulsive", "witty", "earnest",
    "anxious", "optimistic", "stubborn", "generous", "reserved", "outspoken", "meticulous",
    "playful", "pragmatic", "idealistic", "competitive", "diplomatic",
]  # fmt: skip
STYLES = {
    "terse": "short sentences, no emoji, gets to the point",
    "chatty": "long friendly posts with asides and questions to readers",
    "formal": "complete sentences, polite, avoids slang",
    "sarcastic": "dry humour and irony, rarely earnest",
    "enthusiastic": "exclamation marks, emoji, lots of encouragement",
    "analytical": "numbers, sources and careful caveats",
    "storyteller": "anecdotes from daily life before the point",
    "activist": "calls to action, hashtags, strong framing",
}
STANCE_TOPICS = ["tram_line", "harbour_redevelopment", "school_budget", "bike_lanes",
                 "tourism", "rent_control"]  # fmt: skip
NEIGHBOURHOODS = ["Old Harbour", "Millbrook", "Saltmarsh", "Hillcrest", "Station Quarter",
                  "Eastgate", "Riverside"]  # fmt: skip
BIO = [
    "{first} is a {age}-year-old {occupation} from {hood} who cares about {i0} and {i1}.",
    "{occupation_cap} in {hood}, {age}. Spends free time on {i0}; opinions on {topic}.",
    "{first}, {age}, has lived in {hood} for {years} years and works as a {occupation}. "
    "Known among friends for {i0}.",
    "Born in Larkhaven, now a {occupation} in {hood}. Into {i0}, {i1} and arguing about {topic}.",
]


def _stance(rng: random.Random, lean: float) -> float:
    # stances correlate with a latent leaning so that opinion clusters exist in the data
    return round(max(-1.0, min(1.0, 0.6 * lean + rng.gauss(0.0, 0.45))), 2)


def make_persona(rng: random.Random, i: int) -> dict[str, object]:
    """One persona (the order of rng calls is part of the dataset's definition)."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    age = rng.randint(18, 84)
    occupation, typical = rng.choice(OCCUPATIONS)
    if age >= 67 and rng.random() < 0.7:
        occupation, typical = "retiree", ["gardening", "local history", "grandchildren"]
    interests = rng.sample(typical, 2) + rng.sample(EXTRA_INTERESTS, rng.randint(1, 3))
    lean = rng.uniform(-1.0, 1.0)
    stances = {t: _stance(rng, lean) for t in STANCE_TOPICS}
    style = rng.choice(sorted(STYLES))
    hood = rng.choice(NEIGHBOURHOODS)
    bio = rng.choice(BIO).format(
        first=first,
        age=age,
        occupation=occupation,
        occupation_cap=occupation.capitalize(),
        hood=hood,
        i0=interests[0],
        i1=interests[1],
        years=rng.randint(1, age - 10),
        topic=rng.choice(STANCE_TOPICS).replace("_", " "),
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "id": f"p{i:03d}",
        "name": f"{first} {last}",
        "age": age,
        "occupation": occupation,
        "neighbourhood": hood,
        "interests": interests,
        "traits": rng.sample(TRAITS, 3),
        "big_five": {
            k: round(rng.betavariate(2.5, 2.5), 2)
            for k in (
                "openness",
                "conscientiousness",
                "extraversion",
                "agreeableness",
                "neuroticism",
            )
        },
        "style": style,
        "style_hint": STYLES[style],
        "bio": bio,
        "political_leaning": round(lean, 2),
        "stances": stances,
        "activity": round(rng.betavariate(2.0, 5.0), 2),
    }


def render() -> str:
    """The whole JSONL file as text."""
    rng = random.Random(SEED)
    rows = [make_persona(rng, i) for i in range(COUNT)]
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the committed file")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    text = render()
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("personas.jsonl is up to date" if same else "personas.jsonl differs; regenerate")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {COUNT} personas to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
