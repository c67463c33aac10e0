"""The sharing stage: a local hub store (`store`), loading by path or repo id (`loading`), publishing
a run's model with its card and without local paths (`publishing`, `portable`)."""
