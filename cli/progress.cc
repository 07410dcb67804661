// Placeholder: terminal progress lands here.
