"""Published speed-test cards: parse the page text into a structured reference.

parse     the page text into a `Card`, or fail naming the line
sections  the card's three tables as page text: prefill rows, decode matrix, all measurements
figures   figures as the card prints them: separators, units, values glued together
model     the structured reference a card becomes
launch    a launch profile seeded from a card's launch command
command   the handlers of `bench card import FILE` and `bench card launch FILE`
"""
