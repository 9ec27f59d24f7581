package dl

const (
	libcPath     = "/usr/lib/libSystem.B.dylib"
	errnoSymbol  = "__error"
	madvDontNeed = 4
)
