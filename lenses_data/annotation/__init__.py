"""What the model stages say and check: prompt templates (`prompts`), the idiom lexicon
(`phrase_bank`), rule checks (`rules`, `embeddings`) and the answer models (`answers`)."""
