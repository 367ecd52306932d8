"""Published speed-test cards: parse the page text into a structured reference."""
