"""Word lists of the demo sentences: months and weekdays (Babel's CLDR data), subjects, nouns, places, units, goods.

The tables that only one sentence frame uses stay next to that frame in its family module.
"""

from __future__ import annotations

from babel.dates import get_day_names, get_month_names

from vaswani.data.demo.grammar import Noun, Subject

# --- calendar --------------------------------------------------------------------------------------------------------

MONTHS_EN = [get_month_names("wide", locale="en")[i] for i in range(1, 13)]
MONTHS_DE = [get_month_names("wide", locale="de")[i] for i in range(1, 13)]
WEEKDAYS_EN = [get_day_names("wide", locale="en")[i] for i in range(7)]  # Monday first
WEEKDAYS_DE = [get_day_names("wide", locale="de")[i] for i in range(7)]
DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]  # 29 February left out

# --- people ----------------------------------------------------------------------------------------------------------

SUBJECTS = [
    Subject("I", "ich", 0),
    Subject("he", "er", 1),
    Subject("she", "sie", 1),
    Subject("we", "wir", 2),
    Subject("they", "sie", 3),
    Subject("Anna", "Anna", 1),
    Subject("Peter", "Peter", 1),
    Subject("Maria", "Maria", 1),
    Subject("David", "David", 1),
    Subject("my brother", "mein Bruder", 1),
    Subject("my sister", "meine Schwester", 1),
    Subject("my parents", "meine Eltern", 3),
    Subject("the children", "die Kinder", 3),
    Subject("my grandmother", "meine Großmutter", 1),
]
SINGULAR_SUBJECTS = [s for s in SUBJECTS if s.person in (0, 1)]
NAMES = ["Anna", "Peter", "Maria", "David", "Emma", "Paul", "Lena", "Martin", "Julia", "Sophie"]

# --- things, animals, places and events ------------------------------------------------------------------------------

OBJECTS = [
    Noun("book", "books", "Buch", "Bücher", "n"),
    Noun("apple", "apples", "Apfel", "Äpfel", "m"),
    Noun("bottle", "bottles", "Flasche", "Flaschen", "f"),
    Noun("key", "keys", "Schlüssel", "Schlüssel", "m"),
    Noun("pencil", "pencils", "Bleistift", "Bleistifte", "m"),
    Noun("egg", "eggs", "Ei", "Eier", "n"),
    Noun("cup", "cups", "Tasse", "Tassen", "f"),
    Noun("photo", "photos", "Foto", "Fotos", "n"),
    Noun("letter", "letters", "Brief", "Briefe", "m"),
    Noun("ticket", "tickets", "Fahrkarte", "Fahrkarten", "f"),
    Noun("plate", "plates", "Teller", "Teller", "m"),
    Noun("glass", "glasses", "Glas", "Gläser", "n"),
    Noun("lamp", "lamps", "Lampe", "Lampen", "f"),
    Noun("chair", "chairs", "Stuhl", "Stühle", "m"),
    Noun("candle", "candles", "Kerze", "Kerzen", "f"),
]
ANIMALS = [
    Noun("dog", "dogs", "Hund", "Hunde", "m"),
    Noun("cat", "cats", "Katze", "Katzen", "f"),
    Noun("bird", "birds", "Vogel", "Vögel", "m"),
    Noun("sheep", "sheep", "Schaf", "Schafe", "n"),
    Noun("cow", "cows", "Kuh", "Kühe", "f"),
    Noun("horse", "horses", "Pferd", "Pferde", "n"),
    Noun("mouse", "mice", "Maus", "Mäuse", "f"),
    Noun("duck", "ducks", "Ente", "Enten", "f"),
    Noun("goat", "goats", "Ziege", "Ziegen", "f"),
    Noun("chicken", "chickens", "Huhn", "Hühner", "n"),
]
# (English prepositional phrase, German prepositional phrase)
OBJECT_PLACES = [
    ("in the box", "in der Kiste"),
    ("in the kitchen", "in der Küche"),
    ("in the drawer", "in der Schublade"),
    ("in the cupboard", "im Schrank"),
    ("in the office", "im Büro"),
    ("on the table", "auf dem Tisch"),
]
ANIMAL_PLACES = [
    ("in the garden", "im Garten"),
    ("on the farm", "auf dem Bauernhof"),
    ("in the field", "auf dem Feld"),
    ("in the park", "im Park"),
    ("at the zoo", "im Zoo"),
]
PAST_TIMES = [
    ("yesterday", "gestern"),
    ("last week", "letzte Woche"),
    ("last year", "letztes Jahr"),
    ("this morning", "heute Morgen"),
    *[(f"on {en}", f"am {de}") for en, de in zip(WEEKDAYS_EN, WEEKDAYS_DE, strict=True)],
]
CITIES = [
    ("Berlin", "Berlin"),
    ("Hamburg", "Hamburg"),
    ("Munich", "München"),
    ("Vienna", "Wien"),
    ("Cologne", "Köln"),
    ("Zurich", "Zürich"),
    ("Frankfurt", "Frankfurt"),
    ("Dresden", "Dresden"),
    ("London", "London"),
    ("Paris", "Paris"),
    ("Rome", "Rom"),
    ("Prague", "Prag"),
    ("Warsaw", "Warschau"),
    ("Lisbon", "Lissabon"),
    ("Copenhagen", "Kopenhagen"),
]
EVENTS = [  # (English, German with article, German gender)
    ("meeting", "Besprechung", "f"),
    ("exam", "Prüfung", "f"),
    ("concert", "Konzert", "n"),
    ("wedding", "Hochzeit", "f"),
    ("party", "Feier", "f"),
    ("match", "Spiel", "n"),
    ("trip", "Ausflug", "m"),
]

# --- units, goods and things with a price ----------------------------------------------------------------------------

# Measure nouns: masculine and neuter units stay singular after numbers ("zwölf Kilogramm"), feminine ones do not.
KILOGRAM = Noun("kilogram", "kilograms", "Kilogramm", "Kilogramm", "n")
GRAM = Noun("gram", "grams", "Gramm", "Gramm", "n")
LITRE = Noun("litre", "litres", "Liter", "Liter", "m")
KILOMETRE = Noun("kilometre", "kilometres", "Kilometer", "Kilometer", "m")
METRE = Noun("metre", "metres", "Meter", "Meter", "m")
CENTIMETRE = Noun("centimetre", "centimetres", "Zentimeter", "Zentimeter", "m")
BOTTLE = Noun("bottle", "bottles", "Flasche", "Flaschen", "f")
GLASS = Noun("glass", "glasses", "Glas", "Gläser", "n")
CUP = Noun("cup", "cups", "Tasse", "Tassen", "f")
BAG = Noun("bag", "bags", "Tüte", "Tüten", "f")
SLICE = Noun("slice", "slices", "Scheibe", "Scheiben", "f")

SOLIDS = [
    ("apples", "Äpfel"),
    ("potatoes", "Kartoffeln"),
    ("tomatoes", "Tomaten"),
    ("cherries", "Kirschen"),
    ("flour", "Mehl"),
    ("sugar", "Zucker"),
    ("rice", "Reis"),
]
DRINKS = [("milk", "Milch"), ("water", "Wasser"), ("juice", "Saft"), ("lemonade", "Limonade")]
LIQUIDS = [*DRINKS, ("wine", "Wein"), ("oil", "Öl")]
HOT_DRINKS = [("coffee", "Kaffee"), ("tea", "Tee")]
SLICEABLE = [("bread", "Brot"), ("cheese", "Käse"), ("ham", "Schinken")]
# (unit, goods it measures, smallest and largest number)
GOODS_UNITS = [
    (KILOGRAM, SOLIDS, 1, 50),
    (GRAM, SOLIDS, 50, 999),
    (BAG, SOLIDS, 1, 12),
    (LITRE, LIQUIDS, 1, 20),
    (BOTTLE, LIQUIDS, 1, 24),
    (GLASS, LIQUIDS, 1, 10),
    (CUP, HOT_DRINKS, 1, 10),
    (SLICE, SLICEABLE, 1, 12),
]
DRINK_UNITS = [(LITRE, DRINKS, 1, 4), (BOTTLE, DRINKS, 1, 6), (GLASS, DRINKS, 1, 10), (CUP, HOT_DRINKS, 1, 10)]
RECIPE_UNITS = [(GRAM, SOLIDS, 50, 999), (KILOGRAM, SOLIDS, 1, 5), (LITRE, DRINKS[:2], 1, 3)]
ITEMS = [  # things with a price
    Noun("book", "books", "Buch", "Bücher", "n"),
    Noun("ticket", "tickets", "Fahrkarte", "Fahrkarten", "f"),
    Noun("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n"),
    Noun("coat", "coats", "Mantel", "Mäntel", "m"),
    Noun("lamp", "lamps", "Lampe", "Lampen", "f"),
    Noun("jacket", "jackets", "Jacke", "Jacken", "f"),
    Noun("umbrella", "umbrellas", "Regenschirm", "Regenschirme", "m"),
    Noun("sofa", "sofas", "Sofa", "Sofas", "n"),
    Noun("table", "tables", "Tisch", "Tische", "m"),
    Noun("watch", "watches", "Armbanduhr", "Armbanduhren", "f"),
]

# --- units of time ---------------------------------------------------------------------------------------------------

MINUTE = Noun("minute", "minutes", "Minute", "Minuten", "f")
HOUR = Noun("hour", "hours", "Stunde", "Stunden", "f")
DAY = Noun("day", "days", "Tag", "Tage", "m")
WEEK = Noun("week", "weeks", "Woche", "Wochen", "f")
MONTH = Noun("month", "months", "Monat", "Monate", "m")
YEAR = Noun("year", "years", "Jahr", "Jahre", "n")
