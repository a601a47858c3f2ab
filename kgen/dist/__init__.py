"""kgen.dist: matrices spread over ranks by named layouts (see kgen.dist.layout)."""
