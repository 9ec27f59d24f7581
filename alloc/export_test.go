package alloc

// StayOnOneNode lets the external tests (package alloc_test) keep every
// pinned allocation of a test in one node's heap; see stayOnOneNode.
var StayOnOneNode = stayOnOneNode
