package dl

const (
	libcPath     = "libc.so.6"
	errnoSymbol  = "__errno_location"
	madvDontNeed = 4
)
