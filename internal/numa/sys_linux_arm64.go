package numa

const (
	sysMbind        = 235
	sysGetMempolicy = 236
	sysMovePages    = 239
	sysGetcpu       = 168
)
