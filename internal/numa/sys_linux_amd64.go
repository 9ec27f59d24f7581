package numa

const (
	sysMbind        = 237
	sysGetMempolicy = 239
	sysMovePages    = 279
	sysGetcpu       = 309
)
