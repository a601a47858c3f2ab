"""Files that ``kgen export`` copies into exported packages (not imported by kgen)."""
