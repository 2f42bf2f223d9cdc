"""Head types: one module per kind of head (`classifier`, `tagger`), each implementing the
`base.HeadType` interface that train, eval, predict and annotate all use; `registry` maps
names to them."""
