package traits

// KeyByName is keyByName, for the external tests.
var KeyByName = keyByName
