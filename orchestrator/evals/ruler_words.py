"""The RULER-style tasks' built-in word lists (keys are "adjective-noun"; the common-words task
draws from their union with VERBS). Written as one string per list so they stay compact."""

from __future__ import annotations

ADJECTIVES: tuple[str, ...] = tuple(
    (
        "able acid angry ancient awake bitter black blue bold brave bright broad broken brown busy calm careful cheap chief clean "
        "clear clever cold common cool crisp cruel curly damp dark deep dense dry dusty eager early easy empty equal exact faint "
        "fair false famous fancy fast fierce fine firm flat fond foolish fresh friendly full funny gentle giant glad golden good "
        "grand gray great green happy hard heavy hidden high hollow honest huge humble hungry icy jolly keen kind large late lazy "
        "light little lively lonely long loud lovely low lucky mad mellow mighty mild modern narrow neat new nice noble noisy odd "
        "old pale perfect pink plain polite poor proud purple quick quiet rapid rare raw red rich rough round royal rusty sad "
        "safe salty sharp shiny short shy silent silly simple slim slow small smooth soft solid sour spare square steady steep "
        "sticky stiff strange strict strong sunny super sweet swift tall tame thick thin tidy tiny tough true ugly vast violet "
        "warm weak wet white wide wild wise witty wooden yellow young zany"
    ).split()
)
NOUNS: tuple[str, ...] = tuple(
    (
        "acorn actor airport album anchor angle ankle apple apron arch arrow artist atlas attic avenue badge bagel bakery balloon "
        "bamboo banana banjo barn barrel basket beach beacon beard bell bench berry bicycle blanket blossom boat bonnet bottle "
        "boulder bracelet branch bread brick bridge broom bucket buffalo bugle butter button cabin cable cactus camera camel "
        "candle canoe canyon carpet carrot castle cellar chair chapel cherry chimney circus cliff clock cloud coast cobweb coffee "
        "comet compass copper cottage cotton crayon cricket crown crystal cup curtain cushion daisy desert diamond dolphin donkey "
        "dragon drum eagle earth engine falcon feather fence ferry fiddle finger flag flute forest fossil fountain fox garden "
        "garlic gate giraffe glacier glove goat granite grape guitar hammer harbor harp hat hawk helmet hill honey horse island "
        "ivory jacket jaguar jar jelly jungle kettle kitten ladder lagoon lamp lantern lemon lettuce library lily lion lizard "
        "lobster locket magnet mango maple marble meadow melon mirror mitten monkey moon mountain mushroom needle nest novel oak "
        "ocean olive onion orchard otter owl paddle palace panda paper parrot peach peanut pearl pebble pencil pepper piano "
        "pigeon pillow pine planet plum pocket pond potato pumpkin puzzle quilt rabbit radio rainbow raven ribbon river robin "
        "rocket saddle sailor salmon sand scarf shell shovel silver sparrow spider spoon squirrel stable statue stone storm sugar "
        "summit sweater table teapot temple thunder tiger tomato tower tractor trumpet tulip tunnel turtle umbrella valley violin "
        "wagon walnut whale wheat whistle willow window wizard wolf zebra"
    ).split()
)
VERBS: tuple[str, ...] = tuple(
    (
        "accept admire allow answer arrive attack bake balance bathe beg behave belong bless blink boast boil borrow bounce "
        "breathe bury calculate carry carve cause chase cheer chew clap climb collect comb compare complain count crawl cross "
        "cycle dance decide deliver describe dig divide drag dream drift drop earn embrace enjoy escape explain explore fasten "
        "fetch fold follow gather glow grab greet guard guess hang harvest hover hunt hurry imagine invent iron juggle jump kneel "
        "knit knock laugh launch lift listen march measure melt mend nod obey offer open paint pause peel plant play pluck polish "
        "pour pray promise pull punch push question race reach read relax remember repair reply rescue rinse roll rub sail "
        "scatter scrub search shiver sing skip sleep slide smile sneeze sniff spell spill spin sprout squeeze stare steer stir "
        "stitch stretch study swim swing tickle travel trust tumble twist unlock vanish wander wash watch whisper wiggle wink "
        "wobble wonder wrap write yawn yell zoom"
    ).split()
)
WORDS: tuple[str, ...] = tuple(sorted(set(ADJECTIVES) | set(NOUNS) | set(VERBS)))
