"""What a user reads at the end: the dataset card (`card`, `card_*`), the build report (`report/`)
and the optional caption diversity selection (`diversity`)."""
