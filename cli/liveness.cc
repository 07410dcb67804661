// Placeholder: sandbox liveness (mount state, daemon lock, disk use) lands here.
