module golden

go 1.22
