"""The `lenses` application: the command line (`cli`, `commands/`) above `lenses_data`, `flows` and
`training`. Nothing below imports it."""
