package agentstore

// Version is this release of the agentstore module, in semantic
// versioning: the newest versioned section of CHANGELOG.md (a test keeps
// the two equal) and the tag "v"+Version of the release. `agentstore
// version` prints it.
const Version = "0.2.0"
