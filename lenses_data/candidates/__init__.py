"""Where candidate images come from and how they are read: source detection (`sources`), URL
fetching (`fetch`), decoding (`imaging`), the hash codes of the decoded view that dedupe compares
(`view_hash`), and the sample pool (`sample`)."""
