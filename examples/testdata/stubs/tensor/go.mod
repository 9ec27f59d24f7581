module gorgonia.org/tensor

go 1.25
