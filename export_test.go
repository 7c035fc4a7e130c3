package agentstore

// ModelsDDL exposes modelsDDL to the external tests: the DDL GORM
// generates from the head models, which the chain's head must equal.
var ModelsDDL = modelsDDL
