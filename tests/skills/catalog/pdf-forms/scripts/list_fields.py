"""List the fillable fields of a PDF (fixture: a skill's bundled script)."""
