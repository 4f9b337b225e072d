"""One module per plugin; each exports NAME and `new(args)`. The registry ties names to modules."""
