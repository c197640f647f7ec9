"""Where candidate images come from and how they are read: source detection (`sources`), URL
fetching (`fetch`), decoding (`imaging`), the sample pool (`sample`)."""
