/* goiwarp extensions; declarations added by the engine work */
#ifndef GOIWARP_H
#define GOIWARP_H

#endif /* GOIWARP_H */
