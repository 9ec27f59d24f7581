package numa

const (
	sysMbind        = 237
	sysGetMempolicy = 239
	sysSetMempolicy = 238
	sysMovePages    = 279
	sysGetcpu       = 309
)
