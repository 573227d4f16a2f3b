"""Applications on top of the API: code completion, reports, the doctor's report."""
