"""The fault-injecting OpenAI-compatible simulator that stands in for vLLM (`simulator`), its answers
(`simcontent`, `simlenses`, `simtexts`), faults (`simfaults`), vLLM's prompt rendering
(`vllm_prompt`), dry-run wiring (`dryrun`), test helpers (`testing`) and the four-stage mix report
(`simreport`). It knows the prompts and the phrase bank and runs stages, so it sits above both."""
