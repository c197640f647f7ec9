"""Vocabulary and templates of the simulator's lens texts (written for this project).

A `Scene` is drawn per image from one family of subjects, props, settings and backdrops plus
shared palettes, light, textures, moods and themes, so every text of an image describes the same
picture. Each lens has its own templates (a short core) and extensions (appended to reach a
target length), in the style of the published examples: Literal names what is visible,
Figurative reads it as a metaphor or symbol (a bank idiom only when asked), Abstract names an
idea, Emotional a mood, Background the setting or technique.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (subject with article, its action) per family; then props, settings, backdrops.
FAMILIES: dict[str, dict[str, tuple]] = {
    "harbour": {
        "subjects": (("an old fisherman", "mends a tangled net"), ("a small red boat", "rocks against the pier"),
                     ("two gulls", "circle above the moorings"), ("a dock worker", "hauls a coil of rope")),
        "props": ("a rusted anchor", "a stack of lobster traps", "a faded life ring"),
        "settings": ("a quiet harbour at low tide", "a weathered wooden pier", "a stony breakwater"),
        "backdrops": ("grey warehouses along the quay", "distant cranes against the horizon",
                      "a row of painted cottages"),
    },
    "street": {
        "subjects": (("a cyclist in a yellow coat", "weaves past parked cars"),
                     ("an elderly woman", "waits at a crossing"),
                     ("a street musician", "plays a battered saxophone"), ("a child", "chases pigeons")),
        "props": ("a flickering lamp post", "a newspaper stand", "a puddle reflecting neon signs"),
        "settings": ("a narrow cobbled lane", "a crowded market square", "a rainy avenue at dusk"),
        "backdrops": ("brick facades with iron balconies", "shop windows glowing warmly",
                      "tangled overhead wires"),
    },
    "countryside": {
        "subjects": (("a lone oak", "spreads its branches over the grass"), ("a farmer", "leads a brown horse"),
                     ("a flock of sheep", "grazes on a slope"), ("a girl with a straw hat", "walks along a track")),
        "props": ("a broken wooden fence", "a rusty wheelbarrow", "a stone wall overgrown with moss"),
        "settings": ("a rolling green hillside", "a dry field after harvest", "a muddy country lane"),
        "backdrops": ("low clouds over distant ridges", "a farmhouse with a red roof", "rows of poplars"),
    },
    "interior": {
        "subjects": (("a woman by the window", "reads a folded letter"), ("a sleeping cat", "curls on a cushion"),
                     ("an old man", "winds a brass clock"), ("two friends", "share tea at a small table")),
        "props": ("a chipped teacup", "a vase of wilting tulips", "a stack of worn books"),
        "settings": ("a dim kitchen with tiled floors", "a cluttered attic room", "a sunlit living room"),
        "backdrops": ("peeling floral wallpaper", "shelves lined with jars", "lace curtains stirring"),
    },
    "mountains": {
        "subjects": (("a hiker with a red pack", "climbs a rocky ridge"), ("a mountain goat", "stands on a ledge"),
                     ("two climbers", "rest beside a cairn"), ("a lone figure", "crosses a snowfield")),
        "props": ("a frayed climbing rope", "a wooden trail marker", "a dented metal flask"),
        "settings": ("a steep alpine pass", "a valley filled with snow", "a windswept summit"),
        "backdrops": ("jagged peaks under a starry sky", "a glacier glinting far below", "drifting mist"),
    },
    "artwork": {
        "subjects": (("a crowned figure", "gazes past the viewer"), ("two horses", "rear in swirling strokes"),
                     ("a dancer in blue", "spins on one foot"), ("a masked face", "emerges from dark paint")),
        "props": ("a gilded frame", "a scattered bouquet of roses", "a torn banner"),
        "settings": ("a canvas of bold geometric shapes", "a mural on a concrete wall", "a dim gallery room"),
        "backdrops": ("layered drips of ochre paint", "a mosaic of cracked tiles", "a sunburst of red rays"),
    },
}  # fmt: skip

PALETTES = ("muted ochre and grey", "deep blues and violets", "warm amber tones", "pale greens and whites",
            "crimson and charcoal", "soft pastel pinks")  # fmt: skip
LIGHTS = ("late afternoon light", "a cold morning haze", "flat overcast light", "the glow of dusk",
          "harsh midday sun", "a single lamp")  # fmt: skip
TEXTURES = ("rough weathered wood", "cracked plaster", "rippling water", "coarse wool",
            "smooth worn stone", "flaking rust")  # fmt: skip
MOODS = (("quiet", "longing"), ("uneasy", "tension"), ("gentle", "contentment"), ("heavy", "solitude"),
         ("restless", "anticipation"), ("tender", "nostalgia"))  # fmt: skip
THEMES = ("endurance", "impermanence", "belonging", "isolation", "renewal", "memory", "freedom",
          "fragility", "order", "chaos", "time", "resilience")  # fmt: skip

# Core templates per lens; {idiom} only in the idiom variants. Each lens leans on its own slots
# (Literal: subject, action, prop; Background: setting, backdrop; Abstract: themes, texture; ...)
# so that the texts of one image do not read as paraphrases of each other.
CORES: dict[str, tuple[str, ...]] = {
    "Literal": (
        "{Subject} {action} in {setting}",
        "{Prop} rests in the foreground, its {texture} catching the light",
        "Close up, {texture} shows flecks of {palette}",
        "Beside {subject}, {prop} sits half in shadow",
    ),
    "Figurative": (
        "{Prop} stands like a sentinel that nobody remembers posting",
        "The weight of the day rests on {subject} like an old coat",
        "{Subject} seems to carry a secret nobody asked to keep",
        "{Setting} reads as a stage for a final act",
        "Like a held breath, the whole place waits for a signal",
    ),
    "Abstract": (
        "{Theme} and {theme2} meet in {texture}",
        "A study in {theme} set against {theme2}",
        "Under {palette}, everything becomes a meditation on {theme}",
        "The rhythm of {texture} speaks of {theme}",
    ),
    "Background": (
        "Framed by {backdrop}, the wider view settles into {palette}",
        "Toward the back, {light} settles on everything out of focus",
        "{Setting} sets the stage under {light}",
        "Loose brushwork leaves the margins open and unhurried",
    ),
    "Emotional": (
        "A {mood_adj} {mood_noun} hangs over everything",
        "{Light} lends {subject} a {mood_adj} calm",
        "Something close to {mood_noun} lingers around {subject}",
        "The stillness stirs {mood_noun} and a wish to stay",
    ),
}
IDIOM_CORES: dict[str, tuple[str, ...]] = {
    "Figurative": (
        "For {subject}, every step here is a kind of {idiom}",
        "{Setting} turns into a kind of {idiom} as the day wears on",
    ),
    "Abstract": ("{Theme} here feels like a kind of {idiom}",),
    "Emotional": ("The {mood_adj} air around {subject} carries a kind of {idiom}",),
}
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "Literal": (
        "under {light}",
        "in the middle distance",
        "as the light shifts",
        "seen from a low angle",
        "its edges sharp",
        "on a still day",
        "as shadows lengthen",
        "in plain colours",
    ),
    "Figurative": (
        "as though guarding a secret",
        "holding on against the turning season",
        "a promise written in {texture}",
        "echoing a story older than the stones",
        "like a lantern at sea",
        "half remembered",
    ),
    "Abstract": (
        "where {theme2} gives way",
        "balanced between presence and absence",
        "and the slow passing of hours",
        "beyond any single object",
        "without resolution",
        "in repeated forms",
    ),
    "Background": (
        "beneath {light}",
        "with {texture} underfoot",
        "far from the centre",
        "in loose, layered strokes",
        "along the upper edge",
        "softly blurred",
    ),
    "Emotional": (
        "stirring something unspoken",
        "as {light} fades",
        "tinged with regret",
        "gentle yet unsettled",
        "like a half-remembered song",
        "almost tender",
    ),
}
PROMPT_FRAMES = (  # imperative, contrastive, rhetorical question, descriptive (Listing 2)
    "Look closely: {clause}.",
    "Seen another way: {clause}.",
    "Not only the obvious: {clause}.",
    "{Clause}, or is there more to it?",
    "{Clause}.",
)
# Light edits a validator might make (Listing 4: grammar, wording; never meaning).
SYNONYMS = {"quiet": "hushed", "old": "aged", "small": "little", "soft": "gentle", "near": "beside",
            "under": "beneath", "stillness": "calm", "rough": "coarse", "distant": "far-off",
            "lies": "rests", "speaks": "tells", "seems": "appears", "lends": "gives", "study": "sketch",
            "scene": "view", "frame": "border", "stage": "platform", "waits": "lingers"}  # fmt: skip


@dataclass(frozen=True)
class Scene:
    """What one simulated image shows; every text of the image draws on it."""

    subject: str
    action: str
    prop: str
    setting: str
    backdrop: str
    palette: str
    light: str
    texture: str
    mood_adj: str
    mood_noun: str
    theme: str
    theme2: str


def draw_scene(rng: random.Random) -> Scene:
    family = FAMILIES[rng.choice(sorted(FAMILIES))]
    subject, action = rng.choice(family["subjects"])
    theme, theme2 = rng.sample(THEMES, 2)
    mood_adj, mood_noun = rng.choice(MOODS)
    return Scene(
        subject=subject,
        action=action,
        prop=rng.choice(family["props"]),
        setting=rng.choice(family["settings"]),
        backdrop=rng.choice(family["backdrops"]),
        palette=rng.choice(PALETTES),
        light=rng.choice(LIGHTS),
        texture=rng.choice(TEXTURES),
        mood_adj=mood_adj,
        mood_noun=mood_noun,
        theme=theme,
        theme2=theme2,
    )


def fill(template: str, scene: Scene, idiom: str = "") -> str:
    """Fill a template's slots; a capitalised slot name capitalises its value's first letter."""
    values = {**scene.__dict__, "idiom": idiom}
    for key in list(values):
        values[key.capitalize()] = _cap(values[key])
    return template.format(**values)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]
