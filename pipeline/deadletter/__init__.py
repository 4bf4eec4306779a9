"""Dead letters: records a stage could not decode or apply, parked whole with why, replayable.

`envelope` builds and decodes letters (stages import `letter_record`), `book` reads the topic,
`replay` re-submits chosen letters at most once, `cli` is `reverser dead-letter list|show|replay`.
"""
